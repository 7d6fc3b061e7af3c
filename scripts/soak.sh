#!/usr/bin/env bash
# Long soaks of the crash tests and fuzzers (CI runs short versions of each in ./scripts/test.sh).
#
#   scripts/soak.sh sim   [SEEDS]  simulated-disk power cuts: the crash workload over SEEDS seeds
#                                  (default 10000), from NVMEDB_TEST_SEED (default 0)
#   scripts/soak.sh cluster [N]    the deterministic cluster simulator: N schedules (default
#                                  1000000) from a random first seed, on every CPU
#   scripts/soak.sh partitions [N] real network partitions (root, iproute2, etcd): N (default 50)
#   scripts/soak.sh kill  [ITERS]  kill -9 of a child running the crash workload, ITERS kills per
#                                  log kind (default 500: 1000 in all)
#   scripts/soak.sh undo  [SEEDS]  every cut of an unfinished transaction's log (default 500 seeds)
#   scripts/soak.sh mutate [N]     N seeded mutations per decoder (default 1000000)
#   scripts/soak.sh fuzz  [SECS]   coverage-guided fuzzing (cargo-fuzz, nightly), SECS per target
#                                  (default 120); prints executions per target
#   scripts/soak.sh all            all of the above with their defaults (but cluster and
#                                  partitions)
#
# Every failure prints the NVMEDB_TEST_SEED / NVMEDB_TEST_ITERS pair that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
n=${2:-}
run_test() { # test binary, filter, iterations
    NVMEDB_TEST_ITERS=$3 cargo test --release -p nvmedb --test "$1" -- --nocapture --test-threads=1 "$2"
}
case "$what" in
sim) run_test recovery_crash every_acknowledged_change_survives_a_power_cut "${n:-10000}" ;;
cluster)
    NVMEDB_SIM_SCHEDULES=${n:-1000000} NVMEDB_SIM_FIRST=${NVMEDB_SIM_FIRST:-$(( (RANDOM << 30) | (RANDOM << 15) | RANDOM ))} \
        NVMEDB_SIM_PROGRESS=1 cargo test --release -p nvmedb-sim --test sim -- --nocapture 2>&1 |
        grep -vE '^nvmedb (standby|repl)'
    ;;
partitions)
    NVMEDB_PARTITIONS=${n:-50} NVMEDB_REQUIRE_NETNS=1 cargo test --release -p nvmedb-cli --test ha_partitions -- --nocapture
    ;;
kill) run_test crash_kill kill9_ "${n:-500}" ;;
undo) run_test recovery_undo every_cut "${n:-500}" ;;
mutate) run_test fuzz_decoders "" "${n:-1000000}" ;;
fuzz)
    secs=${n:-120}
    cd fuzz
    for t in catalog pages log_page_changes file_log repl_frames; do
        cargo +nightly fuzz run -O "$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 2>&1 |
            grep -E "^#[0-9]+.*DONE|^Done [0-9]+ runs|SUMMARY|panicked|ERROR" || true
    done
    ;;
all)
    "$0" mutate
    "$0" undo
    "$0" sim
    "$0" kill
    if command -v cargo-fuzz >/dev/null; then "$0" fuzz; else echo "cargo-fuzz not installed: skipping coverage-guided fuzzing"; fi
    ;;
*)
    sed -n '2,18p' "$0"
    exit 2
    ;;
esac
