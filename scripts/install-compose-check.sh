#!/usr/bin/env bash
# Make `docker-compose` available for tests/deploy (which validate docker-compose.yaml with
# `docker-compose config`; no Docker engine is needed for that). Idempotent: installs Debian's
# docker-compose package only when the command is missing, then prints its version.
#
#   scripts/install-compose-check.sh
set -euo pipefail
source "${BASH_SOURCE[0]%/*}/lib/apt.sh"

if ! command -v docker-compose >/dev/null 2>&1; then
  apt_install install-compose-check docker-compose
  command -v docker-compose >/dev/null 2>&1 || {
    echo "install-compose-check: error: docker-compose still not on PATH" >&2; exit 1; }
fi

docker-compose --version
