#!/usr/bin/env bash
# Runs fio and `nvmedb iobench` on the same O_DIRECT file with the same parameters, interleaved
# (fio, iobench, fio, iobench, ...), REPS times per workload, and prints min/median/max of each
# and the ratio of the medians per workload.
#
# Usage: scripts/iobench-vs-fio.sh [FILE]
#   env: SIZE (default 4G), REPS (3), RUNTIME seconds per run (10), RAMP seconds (1),
#        ONLY (run only the workloads whose name starts with it, e.g. ONLY="4K randread QD32")
# The file must live on a real disk (not tmpfs: O_DIRECT is refused there).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FILE=${1:-$ROOT/target/iobench-vs-fio/testfile}
SIZE=${SIZE:-4G}
REPS=${REPS:-3}
RUNTIME=${RUNTIME:-10}
RAMP=${RAMP:-1}
ONLY=${ONLY:-}
OUT=$ROOT/target/iobench-vs-fio
mkdir -p "$OUT" "$(dirname "$FILE")"

need() { command -v "$1" >/dev/null 2>&1; }
if ! need fio || ! need python3; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio python3 >/dev/null
  else
    echo "fio and python3 are needed (apt-get install fio python3)" >&2
    exit 1
  fi
fi
FSTYPE=$(df --output=fstype "$(dirname "$FILE")" | tail -1)
if [ "$FSTYPE" = tmpfs ]; then
  echo "$FILE is on tmpfs: O_DIRECT is refused there; pass a file on a real disk" >&2
  exit 1
fi

cargo build --release -q -p nvmedb-cli
BIN=$ROOT/target/release/nvmedb

echo "machine: $($BIN machine)"
echo "file: $FILE ($FSTYPE on $(df --output=source "$(dirname "$FILE")" | tail -1)), size $SIZE, $REPS reps x ${RUNTIME}s (+${RAMP}s warm-up), fio $(fio --version)"

# iobench reads into buffers in huge pages (as the engine's buffer frames); fio does the same when a
# hugetlbfs with free huge pages is mounted (on a virtio disk, multi-page reads into 4 KiB pages
# ran at a half to a third of the rate). Set one up with:
#   echo 64 > /proc/sys/vm/nr_hugepages; mkdir -p /mnt/huge; mount -t hugetlbfs none /mnt/huge
HUGE_MOUNT=$(awk '$3 == "hugetlbfs" {print $2; exit}' /proc/mounts)
FIO_MEM=()
if [ -n "$HUGE_MOUNT" ] && [ "$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)" -ge 8 ]; then
  FIO_MEM=(--mem="mmaphuge:$HUGE_MOUNT/iobench-vs-fio-$$")
  echo "fio's buffers: huge pages ($HUGE_MOUNT), as iobench's"
else
  echo "fio's buffers: 4 KiB pages (no hugetlbfs with free huge pages mounted); iobench's are in huge pages, so multi-page reads may favour iobench"
fi

# Lay the file out once with real data, so both tools read allocated blocks.
fio --name=layout --filename="$FILE" --rw=write --bs=1M --size="$SIZE" --direct=1 --ioengine=psync \
    --output=/dev/null >/dev/null

# name | fio arguments | iobench arguments | metric (iops: higher is better; lat: mean latency, lower is better)
WORKLOADS=(
  "4K randread QD32 (fio io_uring)|--rw=randread --bs=4k --ioengine=io_uring --iodepth=32|--rw randread --bs 4k --depth 32|iops"
  "4K randread QD1 (fio psync)|--rw=randread --bs=4k --ioengine=psync --iodepth=1|--rw randread --bs 4k --depth 1 --engine sync|lat"
  "16K randread QD32 (fio io_uring)|--rw=randread --bs=16k --ioengine=io_uring --iodepth=32|--rw randread --bs 16k --depth 32|iops"
  "24K randread QD32 (fio io_uring)|--rw=randread --bs=24k --ioengine=io_uring --iodepth=32|--rw randread --bs 24k --depth 32|iops"
  "4K randwrite QD1 (fio psync)|--rw=randwrite --bs=4k --ioengine=psync --iodepth=1|--rw randwrite --bs 4k --depth 1 --engine sync|lat"
)

RESULTS=$OUT/results.tsv
: >"$RESULTS"
fio_one() { # name args rep
  local json=$OUT/fio-$3-$(echo "$1" | tr -c 'A-Za-z0-9' _).json
  # shellcheck disable=SC2086
  fio --name=bench --filename="$FILE" --size="$SIZE" --direct=1 --time_based --runtime="$RUNTIME" \
      --ramp_time="$RAMP" --norandommap --randrepeat=0 --group_reporting --output-format=json \
      "${FIO_MEM[@]}" $2 >"$json"
  python3 - "$json" "$1" <<'PY' >>"$RESULTS"
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
side = j["read"] if j["read"]["io_bytes"] > 0 else j["write"]
print(f"{sys.argv[2]}\tfio\t{side['iops']:.1f}\t{side['lat_ns']['mean'] / 1000:.2f}\t{side['clat_ns']['percentile']['50.000000'] / 1000:.2f}")
PY
}
iobench_one() { # name args rep (each run's files land in $OUT/iobench/<UTC time>/)
  # shellcheck disable=SC2086
  line=$("$BIN" iobench --device "$FILE" --size "$SIZE" --duration "$RUNTIME" --warmup "$RAMP" --no-progress \
      --results "$OUT" $2 | grep '^RESULT')
  python3 - "$1" "$line" <<'PY' >>"$RESULTS"
import sys
kv = dict(p.split("=", 1) for p in sys.argv[2].split()[1:])
print(f"{sys.argv[1]}\tiobench\t{float(kv['iops']):.1f}\t{float(kv['mean_us']):.2f}\t{float(kv['p50_us']):.2f}")
PY
}

for w in "${WORKLOADS[@]}"; do
  IFS='|' read -r name fargs iargs metric <<<"$w"
  if [ -n "$ONLY" ] && [[ "$name" != "$ONLY"* ]]; then continue; fi
  for rep in $(seq 1 "$REPS"); do
    echo "[$name] rep $rep/$REPS: fio" >&2
    fio_one "$name" "$fargs" "$rep"
    echo "[$name] rep $rep/$REPS: iobench" >&2
    iobench_one "$name" "$iargs" "$rep"
  done
done

python3 - "$RESULTS" "${WORKLOADS[@]}" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
metric = {w.split("|")[0]: w.split("|")[3] for w in sys.argv[2:]}
def mmm(xs):
    return f"{min(xs):.1f} / {statistics.median(xs):.1f} / {max(xs):.1f}"
print()
print("| workload | metric | fio min / median / max | iobench min / median / max | iobench / fio (medians) | target |")
print("| --- | --- | --- | --- | ---: | --- |")
for name in dict.fromkeys(r[0] for r in rows):
    def col(tool, i):
        return [float(r[i]) for r in rows if r[0] == name and r[1] == tool]
    fi, ii = col("fio", 2), col("iobench", 2)
    fl, il = col("fio", 3), col("iobench", 3)
    ratio_iops = statistics.median(ii) / statistics.median(fi)
    ratio_lat = statistics.median(il) / statistics.median(fl)
    if metric[name] == "iops":
        target = "≥ 0.95" if name.startswith("4K randread QD32") else "(reported)"
        print(f"| {name} | IOPS | {mmm(fi)} | {mmm(ii)} | {ratio_iops:.3f} | {target} |")
        print(f"| {name} | mean latency µs | {mmm(fl)} | {mmm(il)} | {ratio_lat:.3f} | |")
    else:
        target = "≤ 1.10" if "randread" in name else "(reported)"
        print(f"| {name} | mean latency µs | {mmm(fl)} | {mmm(il)} | {ratio_lat:.3f} | {target} |")
        print(f"| {name} | IOPS | {mmm(fi)} | {mmm(ii)} | {ratio_iops:.3f} | |")
PY
echo
echo "raw results: $RESULTS; per-run JSON in $OUT (fio-*.json) and $OUT/iobench/"
