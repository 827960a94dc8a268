#!/usr/bin/env bash
# Fetch the jars Spark needs that pyspark does not ship into .cache/jars/ (override with
# SLUICE_JARS_DIR): s3a:// (hadoop-aws + the AWS SDK v2 modules it uses), the PostgreSQL JDBC
# driver, Delta Lake, Spark's Kafka connector (spark-sql-kafka-0-10 + kafka-clients) and
# Spark's Avro data source (spark-avro: the "avro" format name; the files source reads Avro
# with AvroFileFormat, in pyspark's spark-sql since Spark 4.2).
# sluice.spark.spark_session() puts every jar found there on Spark's classpath.
#
# - Versions live in scripts/jars/pom.xml; hadoop-aws must match the Hadoop pyspark bundles
#   and spark-sql-kafka / spark-avro the Spark it bundles, which this script checks against
#   pyspark/jars/hadoop-client-api-*.jar and pyspark/jars/spark-core_2.13-*.jar.
# - Jars pyspark already ships (httpclient, slf4j-api, commons-codec, ...) are not copied, so
#   the classpath never holds two versions of one artifact; the script fails if the result
#   still would (two jars of one artifact, or a Hadoop jar pyspark ships).
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

shopt -s nullglob
core_jars=("$PYSPARK_JARS"/spark-core_2.13-*.jar)
shopt -u nullglob
[[ ${#core_jars[@]} -eq 1 ]] || die "expected one spark-core_2.13-*.jar in $PYSPARK_JARS"
SPARK_VERSION="$(basename "${core_jars[0]}" .jar)"
SPARK_VERSION="${SPARK_VERSION#spark-core_2.13-}"

POM_SPARK_VERSION="$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' "$POM" | head -n1)"
if [[ "$SPARK_VERSION" != "$POM_SPARK_VERSION" ]]; then
  die "pyspark bundles Spark $SPARK_VERSION but $POM pins spark.version=$POM_SPARK_VERSION
  (spark-sql-kafka-0-10 and spark-avro must be the same release as Spark)"
fi

# --- idempotence --------------------------------------------------------------------------
want="$(sha256sum "$POM" | cut -d' ' -f1) hadoop=$HADOOP_VERSION spark=$SPARK_VERSION"
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

log "resolving hadoop-aws $HADOOP_VERSION (+ AWS SDK v2), spark-sql-kafka and spark-avro $SPARK_VERSION, ... with Maven"
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
# any version: httpclient, slf4j-api, commons-codec, ...). Hadoop and AWS artifacts are kept
# (SDK modules have generic names such as utils or auth), but a Hadoop jar pyspark ships is a
# real duplicate: the pom must exclude it.
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
    org.apache.hadoop)
      [[ -z "${bundled[$artifact]:-}" ]] \
        || die "$group:$artifact is in pyspark already: exclude it in $POM (who pulls it: mvn dependency:tree)"
      ;;
    software.amazon.*) ;;
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

# One jar per artifact name (Maven picks one version per groupId:artifactId; this catches the
# same artifact published under two groups, e.g. org.lz4 / at.yawk.lz4 lz4-java).
dupes="$(for jar in "$tmp"/*.jar; do strip_version "$(basename "$jar")"; done | sort | uniq -d)"
[[ -z "$dupes" ]] || die "two versions of: $dupes (exclude one in $POM)"

shopt -s nullglob
for wanted in hadoop-aws spark-sql-kafka-0-10_2.13 kafka-clients spark-avro_2.13; do
  fetched=("$tmp/$wanted"-[0-9]*.jar)
  [[ ${#fetched[@]} -eq 1 ]] || die "$wanted jar missing after Maven ran"
done
shopt -u nullglob

chmod 755 "$tmp"
printf '%s\n' "$want" >"$tmp/.fetched"
rm -rf "$JARS_DIR"
mv "$tmp" "$JARS_DIR"
trap - EXIT
log "$(find "$JARS_DIR" -name '*.jar' | wc -l) jars, $(du -sh "$JARS_DIR" | cut -f1) in $JARS_DIR"
