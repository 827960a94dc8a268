# The Kafka broker of `make compose-test` where apache/kafka cannot be pulled: the release the
# tests run (scripts/kafka/pom.xml, resolved by Maven into .cache/kafka by `make kafka-jars`),
# on Debian's Java 17, with apache/kafka's interface that docker-compose.yaml uses: KAFKA_*
# variables become server.properties (KAFKA_NODE_ID -> node.id), CLUSTER_ID formats the log
# folder on first start.
ARG DEBIAN_IMAGE=sluice-local/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 1000 --home-dir /opt/kafka --shell /bin/bash appuser \
 && install -d -o appuser /opt/kafka /opt/kafka/config /var/lib/kafka/data
COPY kafka-libs/ /opt/kafka/libs/
COPY kafka-entrypoint.sh /opt/kafka/bin/kafka-entrypoint
USER appuser
EXPOSE 9092 9093 9094
ENTRYPOINT ["/opt/kafka/bin/kafka-entrypoint"]
