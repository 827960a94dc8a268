#!/usr/bin/env bash
# The command handling of apache/airflow's entrypoint, for the local stand-in image
# (docker/local/airflow-base.Dockerfile): `bash ...` / `python ...` run as given, an empty
# command opens a shell, anything else is an `airflow` subcommand.
set -euo pipefail
case "${1:-}" in
  "") exec /bin/bash ;;
  bash) shift; exec /bin/bash "$@" ;;
  python) shift; exec python "$@" ;;
  airflow) shift; exec airflow "$@" ;;
  *) exec airflow "$@" ;;
esac
