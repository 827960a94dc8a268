#!/usr/bin/env bash
# Fetch a Kafka broker (kafka_2.13 + its runtime jars, see scripts/kafka/pom.xml) into
# .cache/kafka/ (override with SLUICE_KAFKA_DIR). tests/fixtures/kafka.py starts it as a
# single-node KRaft cluster on loopback. These jars are NOT on Spark's classpath: that is
# .cache/jars (scripts/fetch-jars.sh), which holds Spark's own Kafka connector and client.
#
# - Maven runs with its own local repository under .cache/m2 (override with SLUICE_M2_REPO),
#   independent of ~/.m2 (shared with fetch-jars.sh).
# - Idempotent: a stamp file records the pom that was fetched; a second run returns at once.
# - Needs only Maven and a JDK (no venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
POM="$ROOT/scripts/kafka/pom.xml"
KAFKA_DIR="${SLUICE_KAFKA_DIR:-$ROOT/.cache/kafka}"
M2_REPO="${SLUICE_M2_REPO:-$ROOT/.cache/m2}"
STAMP="$KAFKA_DIR/.fetched"

log() { printf 'fetch-kafka: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM" | head -n1)"
[[ -n "$KAFKA_VERSION" ]] || die "no <kafka.version> in $POM"

# --- idempotence --------------------------------------------------------------------------
want="$(sha256sum "$POM" | cut -d' ' -f1) kafka=$KAFKA_VERSION"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  log "up to date: Kafka $KAFKA_VERSION in $KAFKA_DIR"
  exit 0
fi

command -v mvn >/dev/null 2>&1 || die "Maven (mvn) is not installed"

# --- fetch into a temporary folder, then swap it in ---------------------------------------
parent="$(dirname "$KAFKA_DIR")"
mkdir -p "$parent" "$M2_REPO"
tmp="$(mktemp -d "$parent/.kafka.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

log "resolving kafka_2.13 $KAFKA_VERSION with Maven..."
# (Maven 3.8 prints ANSI colour resets even in batch mode: strip them; pipefail keeps its status.)
mvn -q -B \
  -f "$POM" \
  -Dmaven.repo.local="$M2_REPO" \
  dependency:copy-dependencies \
  -DincludeScope=runtime \
  -DoutputDirectory="$tmp" \
  2>&1 | sed -E $'s/\e\\[[0-9;]*m//g' >&2

for wanted in "kafka_2.13-$KAFKA_VERSION" "kafka-clients-$KAFKA_VERSION"; do
  [[ -f "$tmp/$wanted.jar" ]] || die "$wanted.jar missing after Maven ran"
done

chmod 755 "$tmp"
printf '%s\n' "$want" >"$tmp/.fetched"
rm -rf "$KAFKA_DIR"
mv "$tmp" "$KAFKA_DIR"
trap - EXIT
log "Kafka $KAFKA_VERSION: $(find "$KAFKA_DIR" -name '*.jar' | wc -l) jars, $(du -sh "$KAFKA_DIR" | cut -f1) in $KAFKA_DIR"
