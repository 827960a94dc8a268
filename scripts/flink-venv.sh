#!/usr/bin/env bash
# Create .cache/bench/flink-venv: the PyFlink that bench/peers/flink_nexmark.py runs in (the
# Nexmark benchmark's Flink peer, bench/nexmark.py --sections flink), apart from .venv.
#
# - A python3.11 venv (override the interpreter with FLINK_VENV_PYTHON) with
#   bench/peers/requirements-flink.txt installed: apache-flink 2.3.0 and everything it pulls in,
#   every version pinned. PyFlink runs its JVM with the `java` on PATH (17 here).
# - Into PyFlink's lib/ folder, which is on the classpath of the JVM PyFlink starts (as a Flink
#   distribution's lib/: the jobs of the peer's in-process MiniCluster see them without
#   uploading them with every job):
#   * from Maven Central, the jars Flink does not ship: flink-sql-parquet (the output is always
#     Parquet) and the shaded Hadoop client it calls but does not bundle. Maven uses its own
#     local repository under .cache/m2 (override with SLUICE_M2_REPO), as fetch-jars.sh does;
#   * sluice-bench-flink.jar, compiled here against PyFlink's own jars from
#     bench/peers/java: the split assigner that reads the bid files in time order and the
#     MICROS_AS_MILLIS function.
# - Idempotent: a stamp file holds the hash of the requirements, the Java sources and this
#   script; when it matches, the script returns at once. Anything else rebuilds the venv anew.
# - Needs python3.11 (with venv), a JDK 17 (javac, jar) and Maven.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SLUICE_FLINK_VENV:-$ROOT/.cache/bench/flink-venv}"
PYTHON="${FLINK_VENV_PYTHON:-python3.11}"
M2_REPO="${SLUICE_M2_REPO:-$ROOT/.cache/m2}"
REQUIREMENTS="$ROOT/bench/peers/requirements-flink.txt"
JAVA_SOURCES="$ROOT/bench/peers/java"
STAMP="$VENV/.installed"
HADOOP_VERSION=3.3.6
MAVEN_ARTIFACTS=(
  "org.apache.flink:flink-sql-parquet:2.3.0"
  # flink-sql-parquet calls Hadoop's Configuration and ParquetFileReader's Hadoop classes.
  "org.apache.hadoop:hadoop-client-api:$HADOOP_VERSION"
  "org.apache.hadoop:hadoop-client-runtime:$HADOOP_VERSION"
)

log() { printf 'flink-venv: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- idempotence --------------------------------------------------------------------------
want="$(cat "$REQUIREMENTS" "${BASH_SOURCE[0]}" $(find "$JAVA_SOURCES" -name '*.java' | sort) | sha256sum | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x "$VENV/bin/python" ]]; then
  log "up to date: $VENV"
  exit 0
fi

# --- prerequisites ------------------------------------------------------------------------
command -v "$PYTHON" >/dev/null || die "no $PYTHON (PyFlink 2.3 needs Python 3.9-3.12; set FLINK_VENV_PYTHON)"
for tool in java javac jar mvn; do
  command -v "$tool" >/dev/null || die "no $tool on PATH (needs a JDK 17 and Maven)"
done
java_major="$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
[[ "$java_major" -ge 17 ]] 2>/dev/null || die "java is version '$java_major'; Flink 2.3 needs 17 or later"

# --- the venv -----------------------------------------------------------------------------
log "creating $VENV with $($PYTHON --version 2>&1)"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
# PIP_* or a PYTHONPATH from an activated .venv must not leak into this one.
unset PYTHONPATH VIRTUAL_ENV PIP_REQUIRE_VIRTUALENV
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQUIREMENTS"
"$VENV/bin/python" -m pip check --disable-pip-version-check >/dev/null \
  || die "pip check failed in $VENV: $("$VENV/bin/python" -m pip check 2>&1 | head -5)"
PYFLINK_LIB="$("$VENV/bin/python" -c 'import os, pyflink; print(os.path.join(os.path.dirname(pyflink.__file__), "lib"))')"

# --- jars ---------------------------------------------------------------------------------
JARS="$PYFLINK_LIB"
for artifact in "${MAVEN_ARTIFACTS[@]}"; do
  log "fetching $artifact"
  # Maven 3.8 prints colour codes even with -q -B: show its output only when it fails.
  out="$(mvn -q -B -Dmaven.repo.local="$M2_REPO" dependency:copy \
    -Dartifact="$artifact" -DoutputDirectory="$JARS" 2>&1)" || die "mvn failed for $artifact: $out"
done

log "compiling $JAVA_SOURCES against $PYFLINK_LIB"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
find "$JAVA_SOURCES" -name '*.java' -print0 \
  | xargs -0 javac --release 17 -Xlint:all,-processing -Werror -cp "$PYFLINK_LIB/*" -d "$build"
jar cf "$JARS/sluice-bench-flink.jar" -C "$build" .

# --- smoke test: the JVM starts and sees the jars -----------------------------------------
"$VENV/bin/python" "$ROOT/bench/peers/flink_nexmark.py" --self-check >&2 \
  || die "the Flink peer's self-check failed in $VENV"

echo "$want" >"$STAMP"
log "installed: $VENV"
