# Shared by the install-*.sh scripts: install Debian packages, with sudo only when not root.
#   source "${BASH_SOURCE[0]%/*}/lib/apt.sh"; apt_install <log-prefix> <package>...
# Exits with a message naming what to install when apt-get is not available.

apt_install() {
  local who="$1"; shift
  command -v apt-get >/dev/null 2>&1 || {
    printf '%s: error: apt-get is not available; install %s yourself\n' "$who" "$*" >&2
    exit 1
  }
  local sudo=()
  if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || {
      printf '%s: error: not root and sudo is not installed\n' "$who" >&2; exit 1; }
    sudo=(sudo)
  fi
  printf '%s: installing Debian package(s): %s\n' "$who" "$*" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
