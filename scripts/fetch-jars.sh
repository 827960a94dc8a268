#!/usr/bin/env bash
# Fetch the jars Spark needs for s3a:// (hadoop-aws + the AWS SDK v2 modules it uses) into
# .cache/jars/ (override with SLUICE_JARS_DIR). sluice.spark.spark_session() puts every jar
# found there on Spark's classpath.
#
# - Versions live in scripts/jars/pom.xml; hadoop-aws must match the Hadoop pyspark bundles,
#   which this script checks against pyspark/jars/hadoop-client-api-*.jar.
# - Jars pyspark already ships (httpclient, slf4j-api, commons-codec, ...) are not copied, so
#   the classpath never holds two versions of one artifact.
# - Maven runs with its own local repository under .cache/m2 (override with SLUICE_M2_REPO),
#   independent of ~/.m2.
# - Idempotent: a stamp file records what was fetched; a second run returns at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
POM="$ROOT/scripts/jars/pom.xml"
JARS_DIR="${SLUICE_JARS_DIR:-$ROOT/.cache/jars}"
M2_REPO="${SLUICE_M2_REPO:-$ROOT/.cache/m2}"
STAMP="$JARS_DIR/.fetched"

log() { printf 'fetch-jars: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- where pyspark's own jars are ---------------------------------------------------------
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
PYSPARK_JARS="$("$PYTHON" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))' 2>/dev/null)" \
  || die "pyspark is not importable with $PYTHON (run 'make venv' first)"
[[ -d "$PYSPARK_JARS" ]] || die "no jars folder in pyspark: $PYSPARK_JARS"

shopt -s nullglob
api_jars=("$PYSPARK_JARS"/hadoop-client-api-*.jar)
shopt -u nullglob
[[ ${#api_jars[@]} -eq 1 ]] || die "expected one hadoop-client-api-*.jar in $PYSPARK_JARS"
HADOOP_VERSION="$(basename "${api_jars[0]}" .jar)"
HADOOP_VERSION="${HADOOP_VERSION#hadoop-client-api-}"

POM_HADOOP_VERSION="$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' "$POM" | head -n1)"
if [[ "$HADOOP_VERSION" != "$POM_HADOOP_VERSION" ]]; then
  die "pyspark bundles Hadoop $HADOOP_VERSION but $POM pins hadoop.version=$POM_HADOOP_VERSION;
  update hadoop.version and aws-sdk.version there (the SDK version hadoop-aws $HADOOP_VERSION uses)"
fi

# --- idempotence --------------------------------------------------------------------------
want="$(sha256sum "$POM" | cut -d' ' -f1) hadoop=$HADOOP_VERSION"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  log "up to date: $JARS_DIR"
  exit 0
fi

command -v mvn >/dev/null 2>&1 || die "Maven (mvn) is not installed"

# --- fetch into a temporary folder, then swap it in ---------------------------------------
parent="$(dirname "$JARS_DIR")"
mkdir -p "$parent" "$M2_REPO"
tmp="$(mktemp -d "$parent/.jars.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

log "resolving hadoop-aws $HADOOP_VERSION and its AWS SDK v2 modules with Maven..."
# (Maven 3.8 prints ANSI colour resets even in batch mode: strip them; pipefail keeps its status.)
mvn -q -B \
  -f "$POM" \
  -Dmaven.repo.local="$M2_REPO" \
  dependency:copy-dependencies \
  -DincludeScope=runtime \
  -Dmdep.useRepositoryLayout=true \
  -DoutputDirectory="$tmp/repo" \
  2>&1 | sed -E $'s/\e\\[[0-9;]*m//g' >&2

# Flatten into $tmp, dropping third-party artifacts pyspark already ships (same artifactId,
# any version: httpclient, slf4j-api, commons-codec, ...). Hadoop and AWS artifacts are kept.
strip_version() { sed -E 's/-[0-9][0-9A-Za-z.+_-]*\.jar$//' <<<"$1"; }
declare -A bundled=()
for jar in "$PYSPARK_JARS"/*.jar; do
  bundled["$(strip_version "$(basename "$jar")")"]=1
done
while IFS= read -r jar; do
  rel="${jar#"$tmp/repo/"}"                 # group/as/path/artifact/version/artifact-version.jar
  artifact="$(basename "$(dirname "$(dirname "$rel")")")"
  group="$(dirname "$(dirname "$(dirname "$rel")")")"
  group="${group//\//.}"
  case "$group" in
    org.apache.hadoop | software.amazon.*) ;;
    *)
      if [[ -n "${bundled[$artifact]:-}" ]]; then
        log "skip $group:$artifact (pyspark ships it)"
        continue
      fi
      ;;
  esac
  mv "$jar" "$tmp/"
done < <(find "$tmp/repo" -name '*.jar' | sort)
rm -rf "$tmp/repo"

shopt -s nullglob
fetched=("$tmp"/hadoop-aws-*.jar)
shopt -u nullglob
[[ ${#fetched[@]} -eq 1 ]] || die "hadoop-aws jar missing after Maven ran"

chmod 755 "$tmp"
printf '%s\n' "$want" >"$tmp/.fetched"
rm -rf "$JARS_DIR"
mv "$tmp" "$JARS_DIR"
trap - EXIT
log "$(find "$JARS_DIR" -name '*.jar' | wc -l) jars, $(du -sh "$JARS_DIR" | cut -f1) in $JARS_DIR"
