#!/usr/bin/env bash
# Pack benchmark: the same work (decode, shorter:256, JPEG q90, tar) done by webdataset.ShardWriter
# + PIL and by `shardtool pack --jobs 1` on the same real-photo crops, alternating runs; prints
# images/s per core, the ratio, our stage breakdown, pipeline overhead, and peak RSS for 1x vs 10x
# the inputs (an ImageFolder of the same files linked ten times), RUNS alternating runs of each,
# medians compared.
#
# Usage: scripts/bench_pack.sh [RUNS]   (default 3; needs bench-data/crops: scripts/make_bench_data.sh,
#        or another ImageFolder in CROPS)
#        RSS_ONLY=1 scripts/bench_pack.sh [RUNS]   (only the peak-RSS part)
#        PACK_ARGS="--decode-scale fast" scripts/bench_pack.sh [RUNS]   (extra flags for our packs)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
CROPS=${CROPS:-bench-data/crops}
[ -d "$CROPS" ] || scripts/make_bench_data.sh
cargo build --release -q -p shardtool
BIN=target/release/shardtool
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat "$CROPS"/*/* >/dev/null   # warm the page cache

ours=() peer=()
for i in $(seq "$([ -n "${RSS_ONLY:-}" ] && echo 0 || echo "$RUNS")"); do
  python3 scripts/bench_pack_peer.py "$CROPS" "$TMP/peer" >"$TMP/peer.json"
  peer+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["images_per_s"])' "$TMP/peer.json")")
  rm -rf "$TMP/peer"
  # shellcheck disable=SC2086 # PACK_ARGS is a list of flags
  $BIN pack "$CROPS" "$TMP/ours" --resize shorter:256 --quality 90 --jobs 1 --overwrite --json ${PACK_ARGS:-} >"$TMP/ours.json" 2>/dev/null
  ours+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["images_per_s"])' "$TMP/ours.json")")
done

# Peak RSS: an ImageFolder of the 1,000 crops and one of 10,000 (each crop linked 10 times under
# distinct names; links are followed).
python3 - "$CROPS" "$TMP" <<'PY'
import os, sys
crops, tmp = os.path.abspath(sys.argv[1]), sys.argv[2]
for n, name in ((1, "x1"), (10, "x10")):
    for cls in sorted(os.listdir(crops)):
        os.makedirs(os.path.join(tmp, name, cls))
        for f in sorted(os.listdir(os.path.join(crops, cls))):
            for i in range(n):
                stem, ext = os.path.splitext(f)
                os.symlink(os.path.join(crops, cls, f), os.path.join(tmp, name, cls, f"{stem}_{i}{ext}"))
PY
# shellcheck disable=SC2086 # PACK_ARGS is a list of flags
rss() { /usr/bin/time -f %M "$BIN" pack "$1" "$TMP/rss" --resize shorter:256 --jobs 2 --overwrite -q ${PACK_ARGS:-} 2>&1 >/dev/null | tail -n1; }
# Alternating, so drift on a shared machine hits both sizes alike.
rss1=() rss10=()
for i in $(seq "$RUNS"); do
  rss1+=("$(rss "$TMP/x1")")
  rss10+=("$(rss "$TMP/x10")")
done
if [ -n "${RSS_ONLY:-}" ]; then
  python3 - "${rss1[*]}" "${rss10[*]}" <<'PY'
import statistics, sys
a = [int(x) for x in sys.argv[1].split()]
b = [int(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"peak RSS --jobs 2, 1x inputs (1,000) KiB: runs {a} median {ma:.0f}")
print(f"peak RSS --jobs 2, 10x inputs (10,000) KiB: runs {b} median {mb:.0f}")
print(f"growth of the medians: {mb - ma:+.0f} KiB ({100 * (mb / ma - 1):+.1f}%), "
      f"{(mb - ma) * 1024 / 9000:.0f} bytes per added input")
PY
  exit 0
fi

python3 - "$TMP/ours.json" "${rss1[*]}" "${rss10[*]}" "${peer[*]}" "${ours[*]}" <<'PY'
import json, statistics, sys
last = json.load(open(sys.argv[1]))
rss1 = statistics.median(int(x) for x in sys.argv[2].split())
rss10 = statistics.median(int(x) for x in sys.argv[3].split())
peer = [float(x) for x in sys.argv[4].split()]
ours = [float(x) for x in sys.argv[5].split()]
pm, om = statistics.median(peer), statistics.median(ours)
print(f"webdataset+PIL  images/s runs {peer}  median {pm:.0f}")
print(f"shardtool -j1   images/s runs {ours}  median {om:.0f}")
print(f"ratio (per core) {om / pm:.2f}x")
n = last["inputs"]["packed"]
st = last["stage_ms_total"]
print("shardtool ms/image (last run): " + ", ".join(f"{k} {v / n:.3f}" for k, v in st.items()))
bare = st["decode"] + st["resize"] + st["encode"]
wall = last["seconds"] * 1e3
print(f"pipeline overhead: wall {wall / n:.3f} ms/image vs bare decode+resize+encode {bare / n:.3f} -> {100 * (wall / bare - 1):.1f}%")
print(f"peak RSS --jobs 2 (medians of {len(sys.argv[2].split())}): 1x inputs {rss1:.0f} KiB, "
      f"10x inputs {rss10:.0f} KiB ({100 * (rss10 / rss1 - 1):+.1f}%)")
PY
