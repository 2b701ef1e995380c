#!/usr/bin/env bash
# Verify benchmark: checksum-and-structure `shardtool verify` against `cat shards > /dev/null` on
# the same page-cached shards (target: verify at >= 80% of cat's speed), and `verify --decode`
# with --jobs 1 against --jobs 2 (target: decode scales with cores).
#
# Packs bench-data/crops (2,000 real-photo 400x350 crops, repeated through symbolic links where a
# set must reach 1 GB, the scale of the target) three ways:
#   wds      tar shards of the original JPEGs (--encode keep), the crops 20 times over: 40,000
#            samples, 40 shards, about 1 GB
#   wdspng   tar shards of lossless PNGs (--encode png), the crops 4 times over: about 1.3 GB
#   packed   safetensors shards of RGB8 pixels, the crops twice over: about 1.7 GB (the file
#            checksum covers every record; per-record checksums are recomputed only when it fails,
#            or with --decode)
# and, for the decode comparison, the 2,000 JPEGs once (about 50 MB).
# Usage: scripts/bench_verify.sh [RUNS]   (default 30; needs bench-data/crops: scripts/make_bench_data.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-30}
CROPS=bench-data/crops
[ -d "$CROPS" ] || scripts/make_bench_data.sh
cargo build --release -q -p shardtool
BIN=$PWD/target/release/shardtool
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# copies N: a folder of symbolic links holding the crops N times over, under new names.
copies() {
  local dir="$TMP/crops$1"
  for class in "$CROPS"/*/; do
    c=$(basename "$class")
    mkdir -p "$dir/$c"
    for copy in $(seq 1 "$1"); do
      for f in "$class"*; do ln -s "$PWD/$f" "$dir/$c/${copy}_$(basename "$f")"; done
    done
  done
  echo "$dir"
}
$BIN pack "$CROPS" "$TMP/small" --encode keep --shard-samples 250 -q
$BIN pack "$(copies 20)" "$TMP/wds" --encode keep --shard-samples 1000 -q
$BIN pack "$(copies 4)" "$TMP/wdspng" --encode png --shard-samples 500 -q
$BIN pack "$(copies 2)" "$TMP/packed" --format packed --shard-samples 250 -q

# compare CMD_A CMD_B: RUNS rounds, each running both commands once in random order (after
# three warm-up runs each), so that both see the same drift of a noisy machine; prints the median
# wall time of each in ms and the median of the per-round ratios A/B. Commands are started with
# posix_spawn (no shell), stdout and stderr to /dev/null.
compare() {
  python3 - "$RUNS" "$1" "$2" <<'PY'
import os, random, shlex, statistics, sys, time
runs, cmds = int(sys.argv[1]), [shlex.split(c) for c in sys.argv[2:]]
null = os.open(os.devnull, os.O_WRONLY)
def run(c):
    t = time.perf_counter_ns()
    pid = os.posix_spawnp(c[0], c, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)])
    os.waitpid(pid, 0)
    return (time.perf_counter_ns() - t) / 1e6
for c in cmds:
    for _ in range(3):
        run(c)
times = [[], []]
for _ in range(runs):
    order = [0, 1]
    random.shuffle(order)
    for i in order:
        times[i].append(run(cmds[i]))
ratio = statistics.median(a / b for a, b in zip(*times))
print(f"{statistics.median(times[0]):.3f} {statistics.median(times[1]):.3f} {ratio:.3f}")
PY
}

report() { # LABEL A_NAME A_MS B_NAME B_MS RATIO
  python3 - "$@" <<'PY'
import sys
label, an, a, bn, b, r = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], float(sys.argv[5]), float(sys.argv[6])
print(f"{label}:\n  {an:<34} {a:9.2f} ms\n  {bn:<34} {b:9.2f} ms\n  speed of second relative to first: {a / b:.2f}x (median of per-round ratios {r:.2f}x)")
PY
}

echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "tools:   $($BIN --version); $RUNS interleaved rounds per comparison"
for ds in wds wdspng packed; do
  shards=$(ls "$TMP/$ds"/shard-* | tr '\n' ' ')
  bytes=$(cat $shards | wc -c)
  cat $shards >/dev/null # warm the page cache
  samples=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['totals']['samples'])" "$TMP/$ds/manifest.json")
  echo
  echo "== $ds: $(ls "$TMP/$ds"/shard-* | wc -l) shards, $((bytes / 1000000)) MB, $samples samples"
  read -r c v r <<<"$(compare "cat $shards" "$BIN verify $TMP/$ds -q")"
  report "checksum verify (default: one job per core, $(nproc)) vs cat" "cat shards > /dev/null" "$c" "shardtool verify" "$v" "$r"
  python3 -c "import sys; c,v,b,r=map(float,sys.argv[1:]); print(f'  throughput: cat {b/c/1e3:.0f} MB/s, verify {b/v/1e3:.0f} MB/s; verify/cat = {c/v*100:.0f}% of medians, {r*100:.0f}% per round (target >= 80%)')" "$c" "$v" "$bytes" "$r"
  read -r c v r <<<"$(compare "cat $shards" "$BIN verify $TMP/$ds -q --jobs 1")"
  report "checksum verify --jobs 1 vs cat" "cat shards > /dev/null" "$c" "shardtool verify --jobs 1" "$v" "$r"
  python3 -c "import sys; c,v,r=map(float,sys.argv[1:]); print(f'  verify/cat = {c/v*100:.0f}% of medians, {r*100:.0f}% per round')" "$c" "$v" "$r"
done

echo
read -r one two r <<<"$(compare "$BIN verify $TMP/small -q --decode --jobs 1" "$BIN verify $TMP/small -q --decode --jobs 2")"
report "verify --decode (2,000 JPEGs 400x350)" "--decode --jobs 1" "$one" "--decode --jobs 2" "$two" "$r"
python3 -c "import sys; a,b=map(float,sys.argv[1:]); print(f'  images/s: jobs 1 {2000/a*1e3:.0f}, jobs 2 {2000/b*1e3:.0f}; scaling {a/b:.2f}x on 2 jobs')" "$one" "$two"
