#!/usr/bin/env bash
# The README's main job: installs what is missing, builds in release mode and runs the default
# lab experiment. Extra arguments are passed to the experiment.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v fio >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null || true
fi
cargo build --release -p nvmedb-cli
exec ./target/release/nvmedb machine "$@"
