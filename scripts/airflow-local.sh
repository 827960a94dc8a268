#!/usr/bin/env bash
# `make airflow`: a real Airflow 3 (API server, scheduler, DAG processor, triggerer) on
# localhost with the demo pipeline, storage on the embedded default (local directories).
# `make airflow-stop` stops it. State lives in .airflow/ (delete it to start over).
# Next to it runs `sluice serve` (the warm execution mode's epoch server, connection
# sluice_serve); the DAGs use it when SLUICE_EXECUTION=warm (docs/warm-execution.md).
#   AIRFLOW_PORT=8080      API server / UI port
#   SLUICE_SERVE_PORT=8790 sluice serve's port (loopback)
#   SLUICE_EXECUTION=cold  or warm: how the DAGs run the process step
#   SLUICE_DATA_ROOT=data/airflow  where the pipelines read, write and checkpoint: each
#                             shipped spec in its own folder under it (demo/, nexmark/, ...)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
BIN=$ROOT/.venv/bin
HOME_DIR=$ROOT/.airflow
PORT=${AIRFLOW_PORT:-8080}
URL="http://127.0.0.1:$PORT"
SERVICES=(api-server scheduler dag-processor triggerer)
SERVE_PORT=${SLUICE_SERVE_PORT:-8790}
SERVE_URL="http://127.0.0.1:$SERVE_PORT"
SERVE_STATE=$HOME_DIR/serve

stop() {
  for name in serve "${SERVICES[@]}"; do
    pidfile=$HOME_DIR/$name.pid
    if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      kill -TERM -- "-$(cat "$pidfile")" 2>/dev/null || kill -TERM "$(cat "$pidfile")"
      echo "stopped $name"
    fi
    rm -f "$pidfile"
  done
}
if [[ ${1:-start} == stop ]]; then stop; exit 0; fi

mkdir -p "$HOME_DIR/logs"
PASSWORD_FILE=$HOME_DIR/passwords.json
if [[ ! -f $PASSWORD_FILE ]]; then
  PASSWORD=$("$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(12))')
  printf '{"admin": "%s"}\n' "$PASSWORD" > "$PASSWORD_FILE"
  chmod 600 "$PASSWORD_FILE"
fi
PASSWORD=$("$BIN/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["admin"])' "$PASSWORD_FILE")

export AIRFLOW_HOME=$HOME_DIR
export AIRFLOW__CORE__DAGS_FOLDER=$ROOT/dags
export AIRFLOW__CORE__PLUGINS_FOLDER=$ROOT/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=admin:admin
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=$PASSWORD_FILE
export AIRFLOW__API__BASE_URL=$URL
export AIRFLOW__API__PORT=$PORT
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL=$URL/execution/
if [[ -n ${SLUICE_DATA:-} ]]; then
  # One folder for every pipeline: the DAG file would refuse the clash (an import error).
  echo "airflow-local: error: SLUICE_DATA is set ($SLUICE_DATA); it is one pipeline's folder." \
       "Unset it and set SLUICE_DATA_ROOT (each shipped spec keeps its own folder under it)." >&2
  exit 2
fi
export SLUICE_DATA_ROOT=${SLUICE_DATA_ROOT:-$ROOT/data/airflow}
[[ $SLUICE_DATA_ROOT == /* || $SLUICE_DATA_ROOT == *://* ]] || SLUICE_DATA_ROOT=$ROOT/$SLUICE_DATA_ROOT
DEMO_SPEC=$ROOT/include/pipelines/clicks_per_minute.yaml
export PATH=$BIN:$PATH

stop >/dev/null
echo "== sluice serve on $SERVE_URL (log: $HOME_DIR/logs/serve.log)"
setsid "$BIN/sluice" serve --port "$SERVE_PORT" --state-dir "$SERVE_STATE" \
  --pipelines-dir "$ROOT/include/pipelines" --master "local[2]" \
  >"$HOME_DIR/logs/serve.log" 2>&1 < /dev/null &
echo $! >"$HOME_DIR/serve.pid"
echo "== metadata database ($HOME_DIR/airflow.db)"
"$BIN/airflow" db migrate >"$HOME_DIR/logs/db-migrate.log" 2>&1 || {
  tail -20 "$HOME_DIR/logs/db-migrate.log"; exit 1; }
echo "== pools, the Spark connection and the sluice serve connection"
SERVE_TOKEN_ARGS=()  # with $SLUICE_SERVE_TOKEN set, server and provisioning both read it
if [[ -z ${SLUICE_SERVE_TOKEN:-} ]]; then
  for _ in $(seq 1 60); do [[ -s $SERVE_STATE/token ]] && break; sleep 0.5; done
  SERVE_TOKEN_ARGS=(--serve-token-file "$SERVE_STATE/token")
fi
"$BIN/python" -m sluice.airflow.provision --spark-master "local[2]" \
  --serve-url "$SERVE_URL" "${SERVE_TOKEN_ARGS[@]}"
DEMO_IN=$("$BIN/python" -c 'import sys; from sluice.spec import load_spec; print(load_spec(sys.argv[1]).source.path)' "$DEMO_SPEC")
echo "== demo input in $DEMO_IN"
DEMO_IN=$DEMO_IN "$BIN/python" - <<'PY'
import os
from pathlib import Path
from sluice.demo import write_click_files
folder = Path(os.environ["DEMO_IN"])
if folder.is_dir() and any(folder.iterdir()):
    print(f"kept {sum(1 for _ in folder.iterdir())} existing files")
else:
    print(f"wrote {len(write_click_files(folder))} files")
PY
for name in "${SERVICES[@]}"; do
  args=("$name")
  [[ $name == api-server ]] && args+=(--port "$PORT" --host 127.0.0.1)
  setsid "$BIN/airflow" "${args[@]}" >"$HOME_DIR/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$HOME_DIR/$name.pid"
done
printf "== waiting for %s " "$URL"
for _ in $(seq 1 180); do
  if curl -fsS "$URL/api/v2/monitor/health" >/dev/null 2>&1 \
     && curl -fsS "$SERVE_URL/livez" >/dev/null 2>&1; then
    echo "up"
    cat <<MSG

  Airflow UI:  $URL   (login: admin / $PASSWORD)
  DAG:         $URL/dags/sluice__clicks_per_minute  (runs every minute; Trigger for a form)
  checkpoints: $URL/dags/sluice__clicks_per_minute/plugin/sluice_checkpoints  (all: Browse > Sluice pipelines)
  data:        $SLUICE_DATA_ROOT/<folder of each spec>  (the demo: $SLUICE_DATA_ROOT/demo)
  history:     SLUICE_DATA_ROOT=$SLUICE_DATA_ROOT .venv/bin/sluice checkpoints include/pipelines/clicks_per_minute.yaml
  process:     ${SLUICE_EXECUTION:-cold} (SLUICE_EXECUTION=warm make airflow: sluice serve at $SERVE_URL)
  logs:        $HOME_DIR/logs/
  stop:        make airflow-stop
MSG
    exit 0
  fi
  printf "."; sleep 1
done
echo " not up after 180 s; see $HOME_DIR/logs/api-server.log and serve.log" >&2
tail -20 "$HOME_DIR/logs/api-server.log" "$HOME_DIR/logs/serve.log" >&2
exit 1
