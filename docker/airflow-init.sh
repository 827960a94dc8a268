#!/usr/bin/env bash
# The airflow-init service of docker-compose.yaml: prepare the metadata DB for Sluice, then exit.
# Idempotent, so it runs on every `docker compose up`:
#
#   1. airflow db migrate
#   2. the SimpleAuthManager password of the admin user ($AIRFLOW_ADMIN_PASSWORD), written to
#      the passwords file shared with airflow-apiserver (volume airflow-auth)
#   3. the Iceberg catalog database of the example clicks_to_iceberg (compose's PostgreSQL)
#   4. python -m sluice.airflow.provision: one single-slot pool per pipeline spec, the
#      Spark connection (created once; later edits in the UI are kept) and the sluice_serve
#      connection to the sluice-serve service (its token from $SLUICE_SERVE_TOKEN)
set -euo pipefail

log() { printf 'airflow-init: %s\n' "$*"; }

log "airflow $(airflow version)"
log "migrating the metadata database"
airflow db migrate

passwords_file="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:?}"
users="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:?}"
admin="${users%%:*}"
log "setting the password of user '$admin' in $passwords_file"
ADMIN="$admin" PASSWORDS_FILE="$passwords_file" python - <<'PY'
import json
import os
from pathlib import Path

path = Path(os.environ["PASSWORDS_FILE"])
passwords = json.loads(path.read_text() or "{}") if path.is_file() else {}
passwords[os.environ["ADMIN"]] = os.environ.get("AIRFLOW_ADMIN_PASSWORD") or "admin"
path.parent.mkdir(parents=True, exist_ok=True)
tmp = path.with_name(path.name + ".tmp")
tmp.write_text(json.dumps(passwords) + "\n")
tmp.chmod(0o660)
os.replace(tmp, path)
PY

if [[ ${AIRFLOW_CONN_SLUICE_ICEBERG:-} == postgresql://*@postgres:* ]]; then
  # the example clicks_to_iceberg's SQL catalog: a database of its own in the stack's server
  log "creating the Iceberg catalog database (if missing)"
  python - <<'PY'
import os
from urllib.parse import urlsplit

import psycopg2

target = urlsplit(os.environ["AIRFLOW_CONN_SLUICE_ICEBERG"])
name = target.path.lstrip("/")
admin = psycopg2.connect(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].replace("+psycopg2", ""))
admin.autocommit = True
with admin.cursor() as cur:
    cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
    if cur.fetchone() is None:
        cur.execute(f'CREATE DATABASE "{name}"')
        print(f"airflow-init: created database {name}")
admin.close()
PY
fi

log "provisioning pools, the Spark connection and the sluice serve connection"
serve_args=()
[[ -n ${SLUICE_SERVE_URL:-} ]] && serve_args=(--serve-url "$SLUICE_SERVE_URL")  # token: env
python -m sluice.airflow.provision \
  --pipelines "${SLUICE_PIPELINES_DIR:-/opt/sluice/include/pipelines}" \
  --spark-master "${SLUICE_SPARK_MASTER_URL:-spark://spark-master:7077}" "${serve_args[@]}"
log "done"
