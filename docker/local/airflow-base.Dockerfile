# A stand-in for apache/airflow:<version>-python3.11 built without a container registry, for
# `make compose-test` (scripts/compose_test.py) on machines that cannot pull images. Users keep
# the official image (docker-compose.yaml's default); this one only reproduces what
# docker/airflow.Dockerfile and docker-compose.yaml rely on:
#
#   * Debian bookworm with Python 3.11 in a virtualenv at /home/airflow/.local (on PATH),
#     owned by the user airflow (uid 50000, group 0);
#   * AIRFLOW_VERSION, AIRFLOW_HOME=/opt/airflow (logs/ owned by airflow, so a named volume
#     mounted there is writable), curl, dumb-init;
#   * the entrypoint's command handling: `bash ...` and `python ...` run as such, anything
#     else is an `airflow` subcommand (`scheduler`, `api-server`, ...).
#
# Airflow itself is not installed here: docker/airflow.Dockerfile installs
# apache-airflow==${AIRFLOW_VERSION} with requirements.txt, as on the official image.
#
# Base: sluice-local/debian:bookworm, made by debootstrap (scripts/compose_test.py).
ARG DEBIAN_IMAGE=sluice-local/debian:bookworm
FROM ${DEBIAN_IMAGE}

ARG AIRFLOW_VERSION=3.3.2
# Certificates of TLS-inspecting proxies the build machine trusts (may be empty): pip, apt
# and Java (ca-certificates-java) then trust them too.
COPY ca-certificates/ /usr/local/share/ca-certificates/
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv ca-certificates curl dumb-init procps \
 && update-ca-certificates \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 50000 --gid 0 --home-dir /home/airflow --create-home --shell /bin/bash airflow \
 && python3 -m venv /home/airflow/.local \
 && install -d -o airflow -g 0 -m 2775 /opt/airflow /opt/airflow/logs /opt/airflow/dags \
 && chown -R airflow:0 /home/airflow \
 && chmod -R g+rwX /home/airflow
COPY airflow-entrypoint.sh /entrypoint

ENV AIRFLOW_VERSION=${AIRFLOW_VERSION} \
    AIRFLOW_HOME=/opt/airflow \
    PATH=/home/airflow/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8
USER airflow
WORKDIR /opt/airflow
RUN pip install --no-cache-dir --upgrade pip==26.3
ENTRYPOINT ["/usr/bin/dumb-init", "--", "/entrypoint"]
CMD []
