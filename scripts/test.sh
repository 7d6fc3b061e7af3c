#!/usr/bin/env bash
# Runs every test of the workspace. This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets "$@"
cargo test --workspace --doc
