#!/usr/bin/env bash
# Make a headless Chromium available to the browser tests of the checkpoint monitor
# (tests/airflow/test_monitor_ui.py drives it with playwright: /usr/bin/chromium, no download).
# Idempotent: installs Debian's chromium package only when no binary is found, then prints
# its version.
#
#   scripts/install-chromium.sh
set -euo pipefail
source "${BASH_SOURCE[0]%/*}/lib/apt.sh"

CHROMIUM=${SLUICE_CHROMIUM:-/usr/bin/chromium}
if [[ ! -x $CHROMIUM ]]; then
  apt_install install-chromium chromium
  [[ -x $CHROMIUM ]] || {
    echo "install-chromium: error: chromium installed but $CHROMIUM is missing" >&2; exit 1; }
fi
"$CHROMIUM" --version 2>/dev/null | head -n1
