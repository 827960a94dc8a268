#!/usr/bin/env bash
# The flake hunt (issue #32): make test's Kafka, Airflow, serve and faults folders, ROUNDS times
# each, two pytest runs at once so each runs under the other's load. Every run has its own
# basetemp (kept when it fails: the pipelines' stores, the broker's log, Airflow's logs) and log.
# Prints one line per run and a summary; exits non-zero if any run failed.
#
#   scripts/flake-hunt.sh [ROUNDS] [OUT_DIR]      (defaults: 5, .artifacts/flake-hunt)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ROUNDS=${1:-5}
OUT=${2:-.artifacts/flake-hunt}
PYTEST=${PYTEST:-.venv/bin/pytest}
MARKS="not slow and not extended"   # make test's selection
mkdir -p "$OUT/tmp"
OUT=$(cd "$OUT" && pwd)

declare -A FOLDERS=(
  [kafka]="$(ls tests/sources/test_kafka_*.py tests/faults/test_kafka_crash.py | tr '\n' ' ')"
  [airflow]="tests/airflow"
  [serve]="tests/serve"
  [faults]="tests/faults"
)
# two at once: each pair about as long as the other, so the load lasts the whole run
PAIRS=("airflow faults" "kafka serve")

run_one() {  # name round -> appends "name round rc seconds summary" to $OUT/results
  local name=$1 round=$2 started rc summary
  local log="$OUT/$name-$round.log" tmp="$OUT/tmp/$name-$round"
  rm -rf "$tmp"
  started=$(date +%s)
  # shellcheck disable=SC2086
  $PYTEST -p no:cacheprovider -q -m "$MARKS" --basetemp="$tmp" ${FOLDERS[$name]} >"$log" 2>&1
  rc=$?
  summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed)|(passed|failed|error).* in [0-9.]+s' "$log" | tail -n1)
  [[ $rc -eq 0 ]] && rm -rf "$tmp"
  printf '%s round %s: rc %s, %ss, %s (load %s)\n' "$name" "$round" "$rc" \
    "$(( $(date +%s) - started ))" "${summary//=/}" "$(cut -d' ' -f1 /proc/loadavg)" \
    | tee -a "$OUT/results"
}

: >"$OUT/results"
for round in $(seq 1 "$ROUNDS"); do
  for pair in "${PAIRS[@]}"; do
    read -r a b <<<"$pair"
    run_one "$a" "$round" & first=$!
    run_one "$b" "$round" & second=$!
    wait "$first" "$second"
  done
done

failed=$(grep -vc ': rc 0,' "$OUT/results")
echo "flake hunt: $(wc -l <"$OUT/results") runs ($ROUNDS rounds x ${#FOLDERS[@]} folders, two at once), $failed failed; logs in $OUT"
[[ $failed -eq 0 ]]
