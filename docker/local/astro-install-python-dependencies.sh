#!/usr/bin/env bash
# The Astro Runtime's ONBUILD step for requirements.txt (stand-in: astro-runtime.Dockerfile),
# with Airflow held at the Runtime's version.
set -euo pipefail
[[ -s requirements.txt ]] || exit 0
pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" -r requirements.txt
