#!/usr/bin/env bash
# Make a PostgreSQL server available to the tests (the Airflow metadata DB of the end-to-end
# tests; the tests start their own server on loopback from these binaries, no system service).
# Idempotent: installs Debian's postgresql package only when no server binary is found, then
# prints the version of the server the tests will use.
#
#   scripts/install-postgres.sh
set -euo pipefail
source "${BASH_SOURCE[0]%/*}/lib/apt.sh"

find_server() { compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -n1 || true; }

if [[ -z "$(find_server)" ]]; then
  apt_install install-postgres postgresql
  [[ -n "$(find_server)" ]] || {
    echo "install-postgres: error: postgresql installed but no server binary found" >&2; exit 1; }
fi

"$(find_server)" --version
