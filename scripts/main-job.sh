#!/usr/bin/env bash
# The README's main job: installs what is missing, builds in release mode and runs the default
# lab experiment. For now that is a short `nvmedb iobench` on the emulated `optane` profile
# (RAM-backed, labelled EMULATED); extra arguments replace the default iobench flags, e.g.
#   ./scripts/main-job.sh --device /data/testfile --rw randread --depth 32 --size 4G
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v fio >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null || true
fi
cargo build --release -p nvmedb-cli
./target/release/nvmedb machine
if [ "$#" -gt 0 ]; then
  exec ./target/release/nvmedb iobench "$@"
fi
exec ./target/release/nvmedb iobench --device optane --rw randread --bs 4k --depth 1 --size 256M --duration 5 --warmup 1
