#!/usr/bin/env bash
# Fetch an Iceberg REST catalog server for the tests (the Iceberg project's own test fixture,
# org.apache.iceberg.rest.RESTCatalogServer, and what it needs at runtime; see
# scripts/iceberg-rest/pom.xml) into .cache/iceberg-rest/ (override with
# SLUICE_ICEBERG_REST_DIR). tests/fixtures/iceberg.py runs it with `java -cp '<dir>/*'`.
# These jars are NOT on Spark's classpath.
#
# - Maven runs with its own local repository under .cache/m2 (override with SLUICE_M2_REPO),
#   shared with fetch-jars.sh and fetch-kafka.sh.
# - Idempotent: a stamp file records the pom that was fetched; a second run returns at once.
# - Needs only Maven and a JDK (no venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
POM="$ROOT/scripts/iceberg-rest/pom.xml"
REST_DIR="${SLUICE_ICEBERG_REST_DIR:-$ROOT/.cache/iceberg-rest}"
M2_REPO="${SLUICE_M2_REPO:-$ROOT/.cache/m2}"
STAMP="$REST_DIR/.fetched"

log() { printf 'fetch-iceberg-rest: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

ICEBERG_VERSION="$(sed -n 's:.*<iceberg.version>\(.*\)</iceberg.version>.*:\1:p' "$POM" | head -n1)"
[[ -n "$ICEBERG_VERSION" ]] || die "no <iceberg.version> in $POM"

# --- idempotence --------------------------------------------------------------------------
want="$(sha256sum "$POM" | cut -d' ' -f1) iceberg=$ICEBERG_VERSION"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  log "up to date: Iceberg REST catalog $ICEBERG_VERSION in $REST_DIR"
  exit 0
fi

command -v mvn >/dev/null 2>&1 || die "Maven (mvn) is not installed"

# --- fetch into a temporary folder, then swap it in ---------------------------------------
parent="$(dirname "$REST_DIR")"
mkdir -p "$parent" "$M2_REPO"
tmp="$(mktemp -d "$parent/.iceberg-rest.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

log "resolving iceberg-open-api $ICEBERG_VERSION (test-fixtures) with Maven..."
# (Maven 3.8 prints ANSI colour resets even in batch mode: strip them; pipefail keeps its status.)
mvn -q -B \
  -f "$POM" \
  -Dmaven.repo.local="$M2_REPO" \
  dependency:copy-dependencies \
  -DincludeScope=runtime \
  -DoutputDirectory="$tmp" \
  2>&1 | sed -E $'s/\e\\[[0-9;]*m//g' >&2

for wanted in "iceberg-open-api-$ICEBERG_VERSION-test-fixtures" "iceberg-core-$ICEBERG_VERSION" \
              "iceberg-core-$ICEBERG_VERSION-tests"; do
  [[ -f "$tmp/$wanted.jar" ]] || die "$wanted.jar missing after Maven ran"
done

chmod 755 "$tmp"
printf '%s\n' "$want" >"$tmp/.fetched"
rm -rf "$REST_DIR"
mv "$tmp" "$REST_DIR"
trap - EXIT
log "Iceberg REST catalog $ICEBERG_VERSION: $(find "$REST_DIR" -name '*.jar' | wc -l) jars, $(du -sh "$REST_DIR" | cut -f1) in $REST_DIR"
