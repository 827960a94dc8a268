# A stand-in for the official postgres image (docker-compose.yaml's metadata DB) for
# `make compose-test` on machines without a registry: Debian bookworm's PostgreSQL 15, with
# the official image's interface that docker-compose.yaml uses: POSTGRES_USER,
# POSTGRES_PASSWORD, POSTGRES_DB, data in /var/lib/postgresql/data, pg_isready on PATH.
ARG DEBIAN_IMAGE=sluice-local/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && rm -rf /var/lib/postgresql/15 /etc/postgresql/15/main
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
