#!/usr/bin/env bash
# The Docker engine `make compose-test` runs the compose stack on: Debian's docker.io (dockerd,
# containerd, runc), docker-compose (v1) and debootstrap (the local base image: no registry
# is needed). Idempotent: installs only what is missing, then prints the versions.
#
#   scripts/install-docker-engine.sh
#
# It never starts the daemon: scripts/compose_test.py starts dockerd when none is running and
# stops the one it started.
set -euo pipefail
source "${BASH_SOURCE[0]%/*}/lib/apt.sh"

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || [[ -x /usr/sbin/debootstrap ]] || missing+=(debootstrap)
if ((${#missing[@]})); then
  # policy-rc.d 101: the package's scripts must not start (or restart) a daemon behind our back.
  policy=/usr/sbin/policy-rc.d
  created_policy=
  if [[ ! -e $policy && $(id -u) -eq 0 ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && created_policy=1
  fi
  trap '[[ -n $created_policy ]] && rm -f "$policy"' EXIT
  apt_install install-docker-engine "${missing[@]}"
  for tool in dockerd docker-compose; do
    command -v "$tool" >/dev/null 2>&1 || {
      echo "install-docker-engine: error: $tool still not on PATH after installing ${missing[*]}" >&2
      exit 1; }
  done
fi

dockerd --version
docker-compose --version
/usr/sbin/debootstrap --version 2>/dev/null || debootstrap --version
