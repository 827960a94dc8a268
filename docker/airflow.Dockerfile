# syntax=docker/dockerfile:1
# The image of docker-compose.yaml: every Airflow component AND the Spark master / worker.
#
#   apache/airflow (Debian bookworm, Python 3.11 venv in /home/airflow/.local)
#   + a JDK (Spark 4 needs Java 17+; javac builds Sluice's helper jar, sluice.jvm)
#   + requirements.txt (pyspark 4.2.0, the Spark provider, ...) and sluice (editable)
#   + the s3a jars (hadoop-aws + AWS SDK v2), fetched at build time by scripts/fetch-jars.sh
#
# Build context: the repository root (see .dockerignore). The root Dockerfile is Astro's.
#
#   docker build -f docker/airflow.Dockerfile -t sluice-airflow:dev .

# Keep in step with the apache-airflow pin in requirements.txt (tests/deploy checks both).
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11

# --- base: Airflow + Java + the pinned Python dependencies -------------------------------
FROM ${AIRFLOW_IMAGE} AS base

USER root
# /usr/share/man/man1 is missing in slim images and the JRE's postinst links into it.
# A fixed JAVA_HOME for every architecture (amd64, arm64).
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jdk-headless procps \
 && ln -sfn "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17 \
 && apt-get autoremove -yqq --purge \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o airflow -g 0 -m 2775 /opt/sluice /opt/airflow/auth
ENV JAVA_HOME=/usr/lib/jvm/java-17

USER airflow
COPY --chown=airflow:0 requirements.txt /opt/sluice/requirements.txt
# apache-airflow pinned to the base image's version (${AIRFLOW_VERSION}, set by the base image)
# so that pip can never replace the Airflow the image was built with.
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" -r /opt/sluice/requirements.txt

# --- jars: Maven resolves hadoop-aws + the AWS SDK v2 modules (kept out of the final image) --
FROM base AS jars
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends maven \
 && rm -rf /var/lib/apt/lists/*
USER airflow
COPY --chown=airflow:0 scripts/fetch-jars.sh /opt/sluice/scripts/fetch-jars.sh
COPY --chown=airflow:0 scripts/jars/pom.xml /opt/sluice/scripts/jars/pom.xml
# The script checks hadoop.version against the Hadoop pyspark bundles (hence the base stage).
RUN SLUICE_JARS_DIR=/tmp/sluice-jars SLUICE_M2_REPO=/tmp/m2 PYTHON=python \
    bash /opt/sluice/scripts/fetch-jars.sh \
 && rm -rf /tmp/m2

# --- final ----------------------------------------------------------------------------------
FROM base
COPY --from=jars --chown=airflow:0 /tmp/sluice-jars /opt/sluice-jars
# sluice.spark.s3a_jars() reads this folder; the process task passes it to spark-submit --jars.
ENV SLUICE_JARS_DIR=/opt/sluice-jars

# A copy of the project, installed editable at /opt/sluice. docker-compose.yaml bind-mounts
# the working tree over the same path, so the installed package is the host's code.
COPY --chown=airflow:0 . /opt/sluice
RUN pip install --no-cache-dir --no-deps -e /opt/sluice

WORKDIR /opt/sluice
