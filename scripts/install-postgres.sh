#!/usr/bin/env bash
# Make a PostgreSQL server available to the tests (the Airflow metadata DB of the end-to-end
# tests; the tests start their own server on loopback from these binaries, no system service).
# Idempotent: installs Debian's postgresql package only when no server binary is found, then
# prints the version of the server the tests will use.
#
#   scripts/install-postgres.sh
#
# Uses sudo only when not running as root. On a machine without apt-get, it says what to
# install instead of guessing.
set -euo pipefail

log() { printf 'install-postgres: %s\n' "$*" >&2; }

find_server() { compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -n1 || true; }

if [[ -z "$(find_server)" ]]; then
  command -v apt-get >/dev/null 2>&1 || {
    log "error: no PostgreSQL server under /usr/lib/postgresql and apt-get is not available;"
    log "install PostgreSQL 13+ (server binaries: initdb, pg_ctl, postgres) yourself"
    exit 1
  }
  SUDO=()
  if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || { log "error: not root and sudo is not installed"; exit 1; }
    SUDO=(sudo)
  fi
  log "no PostgreSQL server found: installing Debian's postgresql package"
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  [[ -n "$(find_server)" ]] || { log "error: postgresql installed but no server binary found"; exit 1; }
fi

"$(find_server)" --version
