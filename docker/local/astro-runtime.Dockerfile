# A stand-in for the Astro Runtime image that the project's Dockerfile starts FROM
# (astrocrpublic.azurecr.io/runtime:3.3-N-python-3.11), built without a registry for
# `make astro-test` (scripts/compose_test.py --astro), which tags it with that name so that
# the project's Dockerfile builds unchanged. Users get the real Runtime from Astronomer's
# registry (the Astro CLI pulls it). Only what the project relies on is reproduced:
#
#   * Debian bookworm, Python 3.11 (a virtualenv on PATH), Airflow ${AIRFLOW_VERSION}
#     preinstalled, the user astro (uid 50000, group 0), AIRFLOW_HOME=/usr/local/airflow;
#   * the Runtime's ONBUILD steps, run right after the project's FROM line: packages.txt
#     (apt, as root), requirements.txt (pip), then the project copied to /usr/local/airflow.
ARG DEBIAN_IMAGE=sluice-local/debian:bookworm
FROM ${DEBIAN_IMAGE}
ARG AIRFLOW_VERSION=3.3.2
COPY ca-certificates/ /usr/local/share/ca-certificates/
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv ca-certificates curl dumb-init procps \
 && update-ca-certificates \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 50000 --gid 0 --home-dir /usr/local/airflow --create-home --shell /bin/bash astro \
 && python3 -m venv /usr/local/venv \
 && chown -R astro:0 /usr/local/venv /usr/local/airflow
COPY airflow-entrypoint.sh /entrypoint
COPY astro-install-system-packages.sh /usr/local/bin/install-system-packages
COPY astro-install-python-dependencies.sh /usr/local/bin/install-python-dependencies
ENV AIRFLOW_VERSION=${AIRFLOW_VERSION} \
    AIRFLOW_HOME=/usr/local/airflow \
    PATH=/usr/local/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8
USER astro
WORKDIR /usr/local/airflow
RUN pip install --no-cache-dir pip==26.3 "apache-airflow==${AIRFLOW_VERSION}"
LABEL io.astronomer.docker=true io.astronomer.docker.airflow.onbuild=true \
      sluice.stand-in="built by scripts/compose_test.py --astro, not Astronomer's Runtime"
ONBUILD COPY packages.txt .
ONBUILD USER root
ONBUILD RUN /usr/local/bin/install-system-packages
ONBUILD USER astro
ONBUILD COPY requirements.txt .
ONBUILD RUN /usr/local/bin/install-python-dependencies
ONBUILD COPY --chown=astro:0 . .
ENTRYPOINT ["/usr/bin/dumb-init", "--", "/entrypoint"]
CMD []
