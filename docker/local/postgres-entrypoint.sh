#!/usr/bin/env bash
# Entry point of docker/local/postgres.Dockerfile: on an empty $PGDATA, initdb with
# $POSTGRES_USER / $POSTGRES_PASSWORD and create $POSTGRES_DB (as the official image does), then
# run the server (TCP on the container's network, password auth; local socket trusted).
set -euo pipefail
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
mkdir -p "$PGDATA" /var/run/postgresql
chown -R postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
as_pg() { runuser -u postgres -- "$@"; }
if [[ ! -s $PGDATA/PG_VERSION ]]; then
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  chown postgres "$pwfile"
  as_pg initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" \
    --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  # A socket folder of its own while setting up, so pg_isready (the health check) fails
  # until the real server is up.
  init_socket=$(mktemp -d) && chown postgres "$init_socket"
  as_pg pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories=$init_socket" start >/dev/null
  if [[ $POSTGRES_DB != postgres ]]; then
    as_pg psql -v ON_ERROR_STOP=1 -h "$init_socket" -U "$POSTGRES_USER" -d postgres \
      -c "CREATE DATABASE \"$POSTGRES_DB\""
  fi
  as_pg pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
  rmdir "$init_socket" 2>/dev/null || true
  echo "postgres-entrypoint: initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
exec runuser -u postgres -- postgres -D "$PGDATA" -c listen_addresses='*'
