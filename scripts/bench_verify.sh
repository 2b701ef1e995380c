#!/usr/bin/env bash
# Verify benchmark: checksum-and-structure `shardtool verify` against `cat shards > /dev/null` on
# the same page-cached shards (target: verify at >= 80% of cat's speed), and `verify --decode`
# with --jobs 1 against --jobs 2 (target: decode scales with cores).
#
# Packs bench-data/crops (1000 real-photo 400x350 crops) three ways, 4 shards each, and a fourth
# dataset ten times larger:
#   wds     tar shards of the original JPEGs (--encode keep), about 25 MB
#   wds10   the same crops ten times over (symbolic links; 10,000 samples, 12 shards of 1000),
#           about 250 MB: the first dataset's checksum comparison is short enough (2-3 ms) for
#           process start and exit to weigh on it; this one measures throughput
#   wdspng  tar shards of lossless PNGs (--encode png), about 155 MB
#   packed  safetensors shards of RGB8 pixels, about 420 MB (the file checksum covers every record;
#           per-record checksums are recomputed only when it fails, or with --decode)
# Each comparison runs the two commands alternately, in random order, RUNS times (a small VM's
# speed drifts by tens of per cent within minutes; running all of one command, then all of the
# other, as hyperfine does, measures the drift as much as the commands). Prints the medians, the
# ratio of the medians and the median of the per-round ratios. `cat` runs without a shell in front
# of it (its output discarded), so its time is the copy and the process start alone.
#
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

$BIN pack "$CROPS" "$TMP/wds" --encode keep --shard-samples 250 -q
$BIN pack "$CROPS" "$TMP/wdspng" --encode png --shard-samples 250 -q
$BIN pack "$CROPS" "$TMP/packed" --format packed --shard-samples 250 -q
for class in "$CROPS"/*/; do
  c=$(basename "$class")
  mkdir -p "$TMP/crops10/$c"
  for copy in 0 1 2 3 4 5 6 7 8 9; do
    for f in "$class"*; do ln -s "$PWD/$f" "$TMP/crops10/$c/${copy}_$(basename "$f")"; done
  done
done
$BIN pack "$TMP/crops10" "$TMP/wds10" --encode keep --shard-samples 1000 -q

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
for ds in wds wds10 wdspng packed; do
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
read -r one two r <<<"$(compare "$BIN verify $TMP/wds -q --decode --jobs 1" "$BIN verify $TMP/wds -q --decode --jobs 2")"
report "verify --decode (wds, 1000 JPEGs 400x350)" "--decode --jobs 1" "$one" "--decode --jobs 2" "$two" "$r"
python3 -c "import sys; a,b=map(float,sys.argv[1:]); print(f'  images/s: jobs 1 {1000/a*1e3:.0f}, jobs 2 {1000/b*1e3:.0f}; scaling {a/b:.2f}x on 2 jobs')" "$one" "$two"
