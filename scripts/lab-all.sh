#!/usr/bin/env bash
# Runs every experiment of the lab at its default scale, then writes the whole-lab page
# (results/lab-report.html): every seed figure beside ours, from these runs.
#
#   ./scripts/lab-all.sh                      # everything, results under ./results
#   RESULTS=/data/results ./scripts/lab-all.sh
#   ./scripts/lab-all.sh primitive xlog       # only these experiments, then the page
#
# Each experiment's own flags select the papers' scale (see `nvmedb lab <name> --help`). A failing
# experiment is reported and the others still run; the page shows it as "not yet run" (or its
# previous run). The script exits non-zero if any experiment failed.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS:-results}
# The experiments in the order they run (the cheap ones first). A new experiment is one line.
ALL=(engine commit xlog ha tpcc primitive tier pgbench ops)
if [ "$#" -gt 0 ]; then EXPS=("$@"); else EXPS=("${ALL[@]}"); fi

cargo build --release -p nvmedb-cli || exit 1
BIN=./target/release/nvmedb
failed=()
start=$(date +%s)
for e in "${EXPS[@]}"; do
  t0=$(date +%s)
  echo "=== nvmedb lab $e --results $RESULTS"
  if "$BIN" lab "$e" --results "$RESULTS"; then
    echo "=== $e: $(( $(date +%s) - t0 )) s"
  else
    echo "=== $e FAILED after $(( $(date +%s) - t0 )) s" >&2
    failed+=("$e")
  fi
done
"$BIN" lab report --results "$RESULTS" || exit 1
echo "=== all experiments and the page: $(( $(date +%s) - start )) s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
