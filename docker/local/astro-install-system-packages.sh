#!/usr/bin/env bash
# The Astro Runtime's ONBUILD step for packages.txt (stand-in: astro-runtime.Dockerfile):
# every Debian package it names (comments and blank lines ignored).
set -euo pipefail
packages=$(sed -e 's/#.*//' packages.txt 2>/dev/null | tr -s ' \r\n' ' ' || true)
[[ -n ${packages// } ]] || exit 0
mkdir -p /usr/share/man/man1  # a JRE's postinst links into it
apt-get update
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages
apt-get clean
rm -rf /var/lib/apt/lists/*
