#!/usr/bin/env bash
# Partitioned-pack benchmark: (1) packing throughput of 2 parts run at once (one core each)
# against one `pack --jobs 2` of the same plan options, RUNS alternating runs, medians and their
# ratio; (2) `shardtool plan` of a synthetic list of 1,000,000 rows (wall time and peak RSS).
#
# Usage: scripts/bench_partition.sh [RUNS]   (default 3; needs bench-data/crops, made by
#        scripts/make_bench_data.sh, or another ImageFolder in CROPS)
#        PLAN_ROWS=1000000 sets the list size of part (2).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
CROPS=${CROPS:-bench-data/crops}
ROWS=${PLAN_ROWS:-1000000}
[ -d "$CROPS" ] || scripts/make_bench_data.sh
cargo build --release -q -p shardtool
BIN=$PWD/target/release/shardtool
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat "$CROPS"/*/* >/dev/null   # warm the page cache
OPTS=(--resize shorter:256 --quality 90 --shard-samples 200)
n=$(find "$CROPS" -type f -name '*.jpg' | wc -l)

secs() { python3 -c 'import sys,time; print(f"{time.monotonic():.4f}")'; }
single=() parts=()
for _ in $(seq "$RUNS"); do
  t0=$(secs)
  $BIN pack "$CROPS" "$TMP/single" "${OPTS[@]}" --jobs 2 --overwrite -q
  t1=$(secs)
  single+=("$(python3 -c "print($n / ($t1 - $t0))")")

  rm -rf "$TMP/parts"
  $BIN plan "$CROPS" "$TMP/parts" "${OPTS[@]}" -q
  t0=$(secs)
  $BIN pack --plan "$TMP/parts" --part 0/2 --jobs 1 -q &
  $BIN pack --plan "$TMP/parts" --part 1/2 --jobs 1 -q
  wait
  $BIN merge "$TMP/parts" -q
  t1=$(secs)
  parts+=("$(python3 -c "print($n / ($t1 - $t0))")")
  for f in "$TMP"/single/*; do cmp -s "$f" "$TMP/parts/$(basename "$f")" || { echo "differs: $f"; exit 1; }; done
done
python3 - "${single[*]}" "${parts[*]}" "$n" <<'PY'
import statistics, sys
s = [float(x) for x in sys.argv[1].split()]
p = [float(x) for x in sys.argv[2].split()]
print(f"images: {sys.argv[3]}; runs: {len(s)}")
print(f"pack --jobs 2           : median {statistics.median(s):7.1f} images/s  {[round(x) for x in s]}")
print(f"2 parts x --jobs 1 + merge: median {statistics.median(p):7.1f} images/s  {[round(x) for x in p]}")
print(f"ratio parts / single    : {statistics.median(p) / statistics.median(s):.3f}  (target >= 0.95; outputs byte-identical)")
PY

# (2) Plan of a synthetic list: ROWS rows over 1,000 real files (paths repeat; each row is an input).
python3 - "$CROPS" "$TMP/list.csv" "$ROWS" <<'PY'
import os, sys
crops, out, rows = os.path.abspath(sys.argv[1]), sys.argv[2], int(sys.argv[3])
files = sorted(os.path.join(r, f) for r, _, fs in os.walk(crops) for f in fs)[:1000]
with open(out, "w") as f:
    f.write("path,label\n")
    for i in range(rows):
        f.write(f"{files[i % len(files)]},{i % 1000}\n")
PY
/usr/bin/time -f "%e %M" -o "$TMP/time" $BIN plan --list "$TMP/list.csv" "$TMP/big" --shard-samples 5000 -q
read -r wall rss <"$TMP/time"
echo "plan of $ROWS listed inputs: ${wall} s, peak RSS $((rss / 1024)) MiB (targets: < 30 s, < 200 MB); plan files: $(du -sh "$TMP/big/_plan" | cut -f1)"
