#!/usr/bin/env bash
# Make `docker-compose` available for tests/deploy (which validate docker-compose.yaml with
# `docker-compose config`; no Docker engine is needed for that). Idempotent: installs Debian's
# docker-compose package only when the command is missing, then prints its version.
#
#   scripts/install-compose-check.sh
#
# Uses sudo only when not running as root. On a machine without apt-get, it says what to
# install instead of guessing.
set -euo pipefail

log() { printf 'install-compose-check: %s\n' "$*" >&2; }

if ! command -v docker-compose >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || {
    log "error: docker-compose is missing and apt-get is not available;"
    log "install Docker Compose (v1 'docker-compose' or v2 with a 'docker-compose' shim) yourself"
    exit 1
  }
  SUDO=()
  if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || { log "error: not root and sudo is not installed"; exit 1; }
    SUDO=(sudo)
  fi
  log "docker-compose not found: installing Debian's docker-compose package"
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends docker-compose >/dev/null
  command -v docker-compose >/dev/null 2>&1 || { log "error: docker-compose still not on PATH"; exit 1; }
fi

docker-compose --version
