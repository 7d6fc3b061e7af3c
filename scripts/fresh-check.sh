#!/usr/bin/env bash
# Checks that the build and the test command's set-up need nothing but Rust: clones this
# repository into a scratch directory, builds with an empty cargo home (every crate downloaded
# as on a new machine, the vendored protoc included) and an empty target directory, with
# `protoc` and `etcd` hidden in a private mount namespace (bind-mounted over by an empty file),
# then runs a test that needs etcd outside CI (it must say SKIPPED naming the package) and
# with CI=true (it must fail naming it). Needs root (unshare, mount). A cold debug build of the
# engine and its tests: about 15 minutes on 2 cores.
#
#   scripts/fresh-check.sh [SCRATCH_DIR]      (default /tmp/nvmedb-fresh-check)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
scratch="${1:-/tmp/nvmedb-fresh-check}"
rm -rf "$scratch"
mkdir -p "$scratch/cargo-home"
git clone -q "$repo" "$scratch/repo"
: > "$scratch/empty"
hide=()
for p in protoc etcd; do
  if command -v "$p" >/dev/null 2>&1; then hide+=("$(command -v "$p")"); fi
done
export SCRATCH="$scratch" HIDE="${hide[*]}"
unshare -m bash -euo pipefail -c '
  for p in $HIDE; do mount --bind "$SCRATCH/empty" "$p"; done
  cd "$SCRATCH/repo"
  export CARGO_HOME="$SCRATCH/cargo-home" CARGO_TARGET_DIR="$SCRATCH/target"
  echo "protoc here: $(protoc --version 2>&1 | head -1)"
  echo "etcd here: $(etcd --version 2>&1 | head -1)"
  cargo build -p nvmedb --features etcd --test repl_etcd
  ls "$CARGO_HOME"/registry/src/*/ | grep protoc-bin-vendored
  out=$(env -u CI -u NVMEDB_REQUIRE_ETCD cargo test -p nvmedb --features etcd --test repl_etcd 2>&1 || true)
  echo "$out" | grep -q "SKIPPED: .etcd. is not installed (Debian: apt-get install etcd-server" \
    || { echo "$out"; echo "FAIL: no SKIPPED line outside CI" >&2; exit 1; }
  out=$(CI=true cargo test -p nvmedb --features etcd --test repl_etcd 2>&1 || true)
  echo "$out" | grep -q "apt-get install etcd-server" && echo "$out" | grep -q "test result: FAILED" \
    || { echo "$out"; echo "FAIL: CI=true did not fail naming etcd-server" >&2; exit 1; }
  echo "fresh check passed: built without protoc; etcd tests skip outside CI and fail under it"
'
