#!/usr/bin/env bash
# `make airflow`: a real Airflow 3 (API server, scheduler, DAG processor, triggerer) on
# localhost with the shipped pipelines, storage on the embedded default (local directories).
# `make airflow-stop` stops it. State lives in .airflow/ (delete it to start over).
# Every process it starts listens on loopback only (tests/deploy/test_airflow_local.py).
#
# Warm by default: `process` runs on `sluice serve` (one long-lived Spark driver, connection
# sluice_serve; docs/warm-execution.md), started next to Airflow. SLUICE_EXECUTION=cold runs a
# spark-submit per epoch instead, and then no sluice serve is started. A spec's `execution:`
# field wins over either.
#
# The demo DAG (sluice__clicks_per_minute) starts unpaused, every other shipped DAG paused
# (SLUICE_UNPAUSED; applied when Airflow first sees a DAG, later the UI's toggle decides).
#
# Start order: sluice serve (its JVM starts while the rest prepares), the metadata DB, pools and
# connections, the input files, then the API server, and only once it answers the DAG processor,
# triggerer and scheduler: a task's first call to the execution API must not meet a server that
# is still starting.
#   AIRFLOW_LOCAL_HOME=.airflow  its AIRFLOW_HOME: metadata DB, logs, pid files, passwords
#   AIRFLOW_PORT=8080          API server / UI port
#   SLUICE_SERVE_PORT=8790     sluice serve's port (loopback)
#   SLUICE_EXECUTION=warm      or cold: how the DAGs run the process step
#   SLUICE_UNPAUSED=clicks_per_minute  pipelines whose DAG starts unpaused (comma-separated)
#   SLUICE_DATA_ROOT=data/airflow  where the pipelines read, write and checkpoint: each
#                             shipped spec in its own folder under it (demo/, nexmark/, ...)
#   AIRFLOW_STOP_TIMEOUT=60    make airflow-stop: seconds running tasks get to finish
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
BIN=$ROOT/.venv/bin
HOME_DIR=${AIRFLOW_LOCAL_HOME:-$ROOT/.airflow}
[[ $HOME_DIR == /* ]] || HOME_DIR=$ROOT/$HOME_DIR
PORT=${AIRFLOW_PORT:-8080}
URL="http://127.0.0.1:$PORT"
SERVE_PORT=${SLUICE_SERVE_PORT:-8790}
SERVE_URL="http://127.0.0.1:$SERVE_PORT"
SERVE_STATE=$HOME_DIR/serve
DEMO_DAG=sluice__clicks_per_minute
START_TIMEOUT_S=300

stop() { "$BIN/python" "$ROOT/scripts/airflow_local_stop.py" "$HOME_DIR"; }
if [[ ${1:-start} == stop ]]; then stop; exit; fi

export SLUICE_EXECUTION=${SLUICE_EXECUTION:-warm}
if [[ $SLUICE_EXECUTION != warm && $SLUICE_EXECUTION != cold ]]; then
  echo "airflow-local: error: SLUICE_EXECUTION=$SLUICE_EXECUTION; use warm (default) or cold" >&2
  exit 2
fi
if [[ -n ${SLUICE_DATA:-} ]]; then
  # One folder for every pipeline: the DAG file would refuse the clash (an import error).
  echo "airflow-local: error: SLUICE_DATA is set ($SLUICE_DATA); it is one pipeline's folder." \
       "Unset it and set SLUICE_DATA_ROOT (each shipped spec keeps its own folder under it)." >&2
  exit 2
fi
[[ -d $HOME_DIR ]] && stop >/dev/null
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
# Paused unless SLUICE_UNPAUSED names it (the factory sets each Sluice DAG's
# is_paused_upon_creation from it; other DAGs follow this setting).
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=True
export SLUICE_UNPAUSED=${SLUICE_UNPAUSED-clicks_per_minute}
# LocalExecutor forks this many workers at start; 32 (the default) is far more than 2 cores use.
export AIRFLOW__CORE__PARALLELISM=${AIRFLOW__CORE__PARALLELISM:-8}
# An epoch is three tasks, and Airflow 3 starts a task's successor only on the scheduler's next
# loop (no "mini scheduler"): after a loop with nothing to do the scheduler sleeps this long
# (default 1 s), so each hand-off (run created -> plan, plan -> process, process -> commit)
# waited up to that. 0.2 s: hand-offs 2.8 s instead of 3.6 s per epoch (p50), for 3.5 instead
# of 1.1 CPU seconds a minute of an idle scheduler (bench/results/latency.md).
export AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME=${AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME:-0.2}
# A task's calls to the execution API time out after 5 s by default (httpx's default), 5 tries:
# on a busy 2-core machine (a parse, a Spark JVM starting) the API server can take longer, and a
# task whose `run` call never got through is failed by the scheduler ("finished with state
# failed, but the task instance's state attribute is queued"). apache/airflow#56571.
export AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT=${AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT:-30}
# The metadata DB is SQLite (unless AIRFLOW__DATABASE__SQL_ALCHEMY_CONN names another): four
# processes write it, and a writer that waits more than sqlite's 5 s for the lock fails with
# "database is locked" (it crashed the scheduler once). Wait up to 30 s, and use WAL (set on the
# file after the migration) so that readers never block the writer.
SQLITE_DB=
if [[ -z ${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-} ]]; then
  SQLITE_DB=$HOME_DIR/airflow.db
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$SQLITE_DB?timeout=30"
fi
free_port() { "$BIN/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# No log servers: the scheduler and the triggerer run with --skip-serve-logs. Airflow's log
# server binds every interface (0.0.0.0 and [::], no setting for its host in Airflow 3.3), and
# here nothing needs it: every process writes its logs under $HOME_DIR/logs, which the API
# server reads itself (a running task's too). The API server still asks the log port of a
# running task's host; it gets a free port with nothing behind it, not another Airflow's
# log server on 8793/8794 (a test, a second checkout).
export AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=${AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT:-$(free_port)}
export AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=${AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT:-$(free_port)}
# Spark drivers (sluice serve's, a cold epoch's spark-submit) bind loopback, whatever the
# machine's host name resolves to.
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=admin:admin
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=$PASSWORD_FILE
export AIRFLOW__API__BASE_URL=$URL
export AIRFLOW__API__PORT=$PORT
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL=$URL/execution/
export SLUICE_DATA_ROOT=${SLUICE_DATA_ROOT:-$ROOT/data/airflow}
[[ $SLUICE_DATA_ROOT == /* || $SLUICE_DATA_ROOT == *://* ]] || SLUICE_DATA_ROOT=$ROOT/$SLUICE_DATA_ROOT
# clicks_to_iceberg's catalog (connection sluice_iceberg): a SQLite SQL catalog beside its data,
# unless one is defined (any catalog URI: docs/iceberg.md)
if [[ -z ${AIRFLOW_CONN_SLUICE_ICEBERG:-}${SLUICE_CONN_SLUICE_ICEBERG:-} && $SLUICE_DATA_ROOT == /* ]]; then
  mkdir -p "$SLUICE_DATA_ROOT/clicks_to_iceberg"
  export AIRFLOW_CONN_SLUICE_ICEBERG="sqlite:///$SLUICE_DATA_ROOT/clicks_to_iceberg/catalog.db"
fi
export PATH=$BIN:$PATH
# This checkout's package first: the venv's editable install may point at another checkout
# (a git worktree sharing the venv), and every process here imports `sluice`.
export PYTHONPATH=$ROOT/include${PYTHONPATH:+:$PYTHONPATH}
T0=$SECONDS

start() {  # start <name> <command...>: in its own session, pid in $HOME_DIR/<name>.pid
  local name=$1; shift
  setsid "$@" >"$HOME_DIR/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$HOME_DIR/$name.pid"
}

wait_until() {  # wait_until <what> <log> <command...>: poll the command (1 s) until it succeeds
  local what=$1 log=$2; shift 2
  printf "== waiting for %s " "$what"
  for _ in $(seq 1 "$START_TIMEOUT_S"); do
    if "$@" >/dev/null 2>&1; then echo "ok ($((SECONDS - T0)) s)"; return 0; fi
    printf "."; sleep 1
  done
  echo " not ready after $START_TIMEOUT_S s; see $log" >&2
  tail -20 "$log" >&2
  exit 1
}

SERVE_TOKEN_ARGS=()
if [[ $SLUICE_EXECUTION == warm ]]; then
  echo "== sluice serve on $SERVE_URL (log: $HOME_DIR/logs/serve.log)"
  start serve "$BIN/sluice" serve --port "$SERVE_PORT" --state-dir "$SERVE_STATE" \
    --pipelines-dir "$ROOT/include/pipelines" --master "local[2]"
  SERVE_TOKEN_ARGS=(--serve-url "$SERVE_URL")  # with $SLUICE_SERVE_TOKEN set, both read it
  if [[ -z ${SLUICE_SERVE_TOKEN:-} ]]; then
    wait_until "the serve token" "$HOME_DIR/logs/serve.log" test -s "$SERVE_STATE/token"
    SERVE_TOKEN_ARGS+=(--serve-token-file "$SERVE_STATE/token")
  fi
fi
echo "== metadata database (${SQLITE_DB:-\$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN})"
"$BIN/airflow" db migrate >"$HOME_DIR/logs/db-migrate.log" 2>&1 || {
  tail -20 "$HOME_DIR/logs/db-migrate.log"; exit 1; }
if [[ -n $SQLITE_DB ]]; then  # journal_mode=WAL is kept in the file: every connection uses it
  "$BIN/python" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA journal_mode=WAL")' "$SQLITE_DB"
fi
echo "== pools and connections; input files of the shipped specs that read files"
"$BIN/python" -m sluice.airflow.provision --spark-master "local[2]" --seed-inputs \
  "${SERVE_TOKEN_ARGS[@]}"

start api-server "$BIN/airflow" api-server --port "$PORT" --host 127.0.0.1
wait_until "the API server at $URL" "$HOME_DIR/logs/api-server.log" \
  curl -fsS "$URL/api/v2/monitor/health"
start dag-processor "$BIN/airflow" dag-processor
start triggerer "$BIN/airflow" triggerer --skip-serve-logs
start scheduler "$BIN/airflow" scheduler --skip-serve-logs

dag_parsed() {
  local token
  token=$(curl -fsS -X POST "$URL/auth/token" -H 'Content-Type: application/json' \
    -d "{\"username\": \"admin\", \"password\": \"$PASSWORD\"}" \
    | "$BIN/python" -c 'import json,sys; print(json.load(sys.stdin)["access_token"])') || return 1
  curl -fsS -H "Authorization: Bearer $token" "$URL/api/v2/dags/$DEMO_DAG"
}
wait_until "the DAGs to be parsed" "$HOME_DIR/logs/dag-processor.log" dag_parsed
if [[ $SLUICE_EXECUTION == warm ]]; then
  wait_until "sluice serve" "$HOME_DIR/logs/serve.log" curl -fsS "$SERVE_URL/livez"
  PROCESS="warm: on sluice serve at $SERVE_URL (SLUICE_EXECUTION=cold make airflow: a spark-submit per epoch)"
else
  PROCESS="cold: a spark-submit per epoch, no sluice serve (SLUICE_EXECUTION=warm, the default, uses one)"
fi
STOP_HINT="make airflow-stop"
[[ $HOME_DIR == "$ROOT/.airflow" ]] || STOP_HINT="AIRFLOW_LOCAL_HOME=$HOME_DIR $STOP_HINT"
echo "up in $((SECONDS - T0)) s"
cat <<MSG

  Airflow UI:  $URL   (login: admin / $PASSWORD)
  DAG:         $URL/dags/$DEMO_DAG  (unpaused: a run when new input arrives, looked for every ${SLUICE_INPUT_LOOK_SECONDS:-2} s; Trigger for a form)
  paused:      every other shipped DAG (unpause in the UI; SLUICE_UNPAUSED=${SLUICE_UNPAUSED:-} on a fresh .airflow/)
  checkpoints: $URL/dags/$DEMO_DAG/plugin/sluice_checkpoints  (all: Browse > Sluice pipelines)
  data:        $SLUICE_DATA_ROOT/<folder of each spec>  (the demo: $SLUICE_DATA_ROOT/demo)
  history:     SLUICE_DATA_ROOT=$SLUICE_DATA_ROOT .venv/bin/sluice checkpoints include/pipelines/clicks_per_minute.yaml
  process:     $PROCESS
  logs:        $HOME_DIR/logs/
  stop:        $STOP_HINT
MSG
