#!/usr/bin/env bash
# The README's main job: installs what is missing, builds in release mode and runs a quick
# version of the lab's first experiment, `nvmedb lab primitive` (seed 000/001 primitive
# SELECT/UPDATE workload over table-buffer sizes 1-100 % on the real disk and the emulated
# optane, nand and san profiles). A few minutes on 2 cores. Extra arguments are passed to the
# experiment (e.g. --rows 10000 --duration 2 for the documented default run, or --full-scale).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh main
cargo build --release -p nvmedb-cli
./target/release/nvmedb machine
exec ./target/release/nvmedb lab primitive \
  --rows 5000 --reps 3 --warmup 0.5 --duration 1 --iobench-seconds 1 "$@"
