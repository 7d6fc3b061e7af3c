#!/usr/bin/env bash
# Runs every test of the workspace. This is the README's test command and what CI runs. On a
# fresh Debian machine with only Rust it first installs the programs the tests run (as root;
# otherwise it names the packages, and the tests that need them say SKIPPED): scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh test
cargo test --workspace --all-targets "$@"
cargo test --workspace --doc
