#!/usr/bin/env bash
# Verify benchmark: checksum-and-structure `shardtool verify` against `cat shards > /dev/null` on
# the same page-cached shards (target: verify at >= 80% of cat's speed), and `verify --decode`
# with --jobs 1 against --jobs 2 (target: decode scales with cores).
#
# Packs bench-data/crops (1000 real-photo 400x350 crops) three ways, 4 shards each:
#   wds     tar shards of the original JPEGs (--encode keep), about 25 MB
#   wdspng  tar shards of lossless PNGs (--encode png), about 155 MB
#   packed  safetensors shards of RGB8 pixels, about 420 MB (the file checksum covers every record;
#           per-record checksums are recomputed only when it fails, or with --decode)
# Uses hyperfine when installed (apt-get install -y hyperfine), else a loop of RUNS runs with
# medians. Prints the medians and the ratios. `cat` runs without a shell in front of it (its
# output discarded), so its time is the copy and the process start alone.
#
# Usage: scripts/bench_verify.sh [RUNS]   (default 10; needs bench-data/crops: scripts/make_bench_data.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10}
CROPS=bench-data/crops
[ -d "$CROPS" ] || scripts/make_bench_data.sh
cargo build --release -q -p shardtool
BIN=$PWD/target/release/shardtool
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

$BIN pack "$CROPS" "$TMP/wds" --encode keep --shard-samples 250 -q
$BIN pack "$CROPS" "$TMP/wdspng" --encode png --shard-samples 250 -q
$BIN pack "$CROPS" "$TMP/packed" --format packed --shard-samples 250 -q

# median_ms CMD...: median wall time of RUNS runs (after one warm-up), in milliseconds.
median_ms() {
  python3 - "$RUNS" "$@" <<'PY'
import statistics, subprocess, sys, time
runs, cmd = int(sys.argv[1]), sys.argv[2]
subprocess.run(cmd, shell=True, check=False, stdout=subprocess.DEVNULL)
times = []
for _ in range(runs):
    t = time.perf_counter()
    subprocess.run(cmd, shell=True, check=False, stdout=subprocess.DEVNULL)
    times.append((time.perf_counter() - t) * 1e3)
print(f"{statistics.median(times):.2f}")
PY
}

# compare NAME CMD_A CMD_B: median ms of both (hyperfine if present), printed as "a b".
compare() {
  local name=$1 a=$2 b=$3
  if command -v hyperfine >/dev/null; then
    hyperfine -N --warmup 2 --runs "$RUNS" --export-json "$TMP/$name.json" "$a" "$b" >/dev/null 2>&1 ||
      hyperfine --warmup 2 --runs "$RUNS" --export-json "$TMP/$name.json" "$a" "$b" >/dev/null
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print(" ".join("%.2f" % (x["median"] * 1e3) for x in r))' "$TMP/$name.json"
  else
    echo "$(median_ms "$a") $(median_ms "$b")"
  fi
}

report() { # LABEL A_NAME A_MS B_NAME B_MS
  python3 - "$@" <<'PY'
import sys
label, an, a, bn, b = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], float(sys.argv[5])
print(f"{label}:\n  {an:<34} {a:9.2f} ms\n  {bn:<34} {b:9.2f} ms\n  speed of second relative to first: {a / b:.2f}x")
PY
}

echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "tools:   $($BIN --version), $(command -v hyperfine >/dev/null && hyperfine --version || echo "no hyperfine: $RUNS-run medians")"
for ds in wds wdspng packed; do
  shards=$(ls "$TMP/$ds"/shard-* | tr '\n' ' ')
  bytes=$(cat $shards | wc -c)
  cat $shards >/dev/null # warm the page cache
  echo
  echo "== $ds: $(ls "$TMP/$ds"/shard-* | wc -l) shards, $((bytes / 1000000)) MB, 1000 samples"
  read -r c v <<<"$(compare "$ds-cat-j2" "cat $shards" "$BIN verify $TMP/$ds -q")"
  report "checksum verify (default --jobs $(nproc)) vs cat" "cat shards > /dev/null" "$c" "shardtool verify" "$v"
  python3 -c "import sys; c,v,b=map(float,sys.argv[1:]); print(f'  throughput: cat {b/c/1e3:.0f} MB/s, verify {b/v/1e3:.0f} MB/s; verify/cat = {c/v*100:.0f}% (target >= 80%)')" "$c" "$v" "$bytes"
  read -r c v <<<"$(compare "$ds-cat-j1" "cat $shards" "$BIN verify $TMP/$ds -q --jobs 1")"
  report "checksum verify --jobs 1 vs cat" "cat shards > /dev/null" "$c" "shardtool verify --jobs 1" "$v"
  python3 -c "import sys; c,v=map(float,sys.argv[1:]); print(f'  verify/cat = {c/v*100:.0f}%')" "$c" "$v"
done

echo
read -r one two <<<"$(compare decode "$BIN verify $TMP/wds -q --decode --jobs 1" "$BIN verify $TMP/wds -q --decode --jobs 2")"
report "verify --decode (wds, 1000 JPEGs 400x350)" "--decode --jobs 1" "$one" "--decode --jobs 2" "$two"
python3 -c "import sys; a,b=map(float,sys.argv[1:]); print(f'  images/s: jobs 1 {1000/a*1e3:.0f}, jobs 2 {1000/b*1e3:.0f}; scaling {a/b:.2f}x on 2 jobs')" "$one" "$two"
