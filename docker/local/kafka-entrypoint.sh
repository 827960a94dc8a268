#!/usr/bin/env bash
# Entry point of docker/local/kafka.Dockerfile: apache/kafka's environment-to-properties rule
# (KAFKA_FOO_BAR=x -> foo.bar=x; "__" -> "_", "___" -> "-"), `kafka-storage format` with
# $CLUSTER_ID on an empty log folder, then the broker.
set -euo pipefail
config=/opt/kafka/config/server.properties
: >"$config"
while IFS='=' read -r name value; do
  [[ $name == KAFKA_* && $name != KAFKA_HEAP_OPTS && $name != KAFKA_OPTS ]] || continue
  key=${name#KAFKA_}
  key=$(sed -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g' <<<"$key" | tr '[:upper:]' '[:lower:]')
  printf '%s=%s\n' "$key" "$value" >>"$config"
done < <(env)
cat >/opt/kafka/config/log4j2.properties <<'LOG'
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
LOG
java=(java -Xmx512m -Djava.awt.headless=true
      -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties -cp '/opt/kafka/libs/*')
"${java[@]}" kafka.tools.StorageTool format --ignore-formatted --cluster-id="${CLUSTER_ID:?set CLUSTER_ID}" \
  -c "$config"
exec "${java[@]}" kafka.Kafka "$config"
