#!/usr/bin/env bash
# Input-format pack benchmark: the same crops packed from an ImageFolder, from WebDataset shards
# (.jpg + .cls + .txt, 1,000 samples a shard) and from a Hugging Face-layout Parquet file (row
# groups of 100), alternating runs; prints per-format median images/s, the ratio to the
# ImageFolder, each format's stage breakdown, and peak RSS of WebDataset and Parquet packs at 1x
# and 10x the inputs (the shards / rows repeated ten times under distinct keys).
# Target: WDS and Parquet at >= 90% of the ImageFolder's images/s; 10x RSS within 10% of 1x.
#
# Usage: scripts/bench_inputs.sh [RUNS]   (default 3; needs bench-data/crops:
#        scripts/make_bench_data.sh, or another ImageFolder in CROPS)
#        RSS_RUNS=N    runs of each peak-RSS measurement (default RUNS)
#        SPEED_ONLY=1 / RSS_ONLY=1   only one of the two parts
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-${RUNS:-3}}
RSS_RUNS=${RSS_RUNS:-$RUNS}
CROPS=${CROPS:-bench-data/crops}
[ -d "$CROPS" ] || scripts/make_bench_data.sh
cargo build --release -q -p shardtool
BIN=target/release/shardtool
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "writing the inputs from $CROPS ..." >&2
python3 scripts/bench_inputs_make.py "$CROPS" "$TMP/in" 10 >&2
cat "$CROPS"/*/* "$TMP"/in/x1/wds/* "$TMP"/in/x1/parquet/* >/dev/null   # warm the page cache

declare -A INPUT=([imagefolder]="$CROPS" [wds]="$TMP/in/x1/wds" [parquet]="$TMP/in/x1/parquet/data.parquet")
FORMATS=(imagefolder wds parquet)

# Speed: one run of each format per round, so drift on a shared machine hits all alike.
if [ -z "${RSS_ONLY:-}" ]; then
  for i in $(seq "$RUNS"); do
    for f in "${FORMATS[@]}"; do
      "$BIN" pack "${INPUT[$f]}" "$TMP/out" --resize shorter:256 --quality 90 --jobs 2 \
        --overwrite --json >"$TMP/$f.$i.json" 2>/dev/null
      echo "round $i $f: $(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["images_per_s"]))' "$TMP/$f.$i.json") images/s" >&2
    done
  done
  python3 - "$TMP" "$RUNS" "${FORMATS[@]}" <<'PY'
import json, statistics, sys
tmp, runs, formats = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rep = {f: [json.load(open(f"{tmp}/{f}.{i}.json")) for i in range(1, runs + 1)] for f in formats}
med = {f: statistics.median(r["images_per_s"] for r in rep[f]) for f in formats}
for f in formats:
    n = rep[f][0]["inputs"]["packed"]
    ratio = med[f] / med["imagefolder"]
    print(f"{f:<12} {n} images  images/s median of {runs}: {med[f]:.0f}  ratio to imagefolder {ratio:.2f}")
for f in formats:
    # Stage times summed over the workers, per image; medians over the runs.
    n = rep[f][0]["inputs"]["packed"]
    stages = rep[f][0]["stage_ms_total"].keys()
    st = {k: statistics.median(r["stage_ms_total"][k] for r in rep[f]) / n for k in stages}
    wall = statistics.median(r["seconds"] for r in rep[f]) * 1e3 / n
    print(f"{f:<12} ms/image (medians): wall {wall:.3f}; " + ", ".join(f"{k} {v:.3f}" for k, v in st.items()))
PY
fi

# Peak RSS (KiB) of WebDataset and Parquet packs of 1x and 10x the inputs, alternating.
if [ -z "${SPEED_ONLY:-}" ]; then
  rss() { /usr/bin/time -f %M "$BIN" pack "$1" "$TMP/rss" --resize shorter:256 --quality 90 --jobs 2 --overwrite -q 2>&1 >/dev/null | tail -n1; }
  declare -A RSS=()
  for i in $(seq "$RSS_RUNS"); do
    for f in wds parquet; do
      for x in x1 x10; do
        if [ $f = wds ]; then in="$TMP/in/$x/wds"; else in="$TMP/in/$x/parquet/data.parquet"; fi
        RSS[$f.$x]="${RSS[$f.$x]:-} $(rss "$in")"
        echo "rss round $i $f $x: ${RSS[$f.$x]##* } KiB" >&2
      done
    done
  done
  python3 - "${RSS[wds.x1]}" "${RSS[wds.x10]}" "${RSS[parquet.x1]}" "${RSS[parquet.x10]}" <<'PY'
import statistics, sys
runs = [[int(v) for v in a.split()] for a in sys.argv[1:]]
for name, one, ten in (("wds", runs[0], runs[1]), ("parquet", runs[2], runs[3])):
    m1, m10 = statistics.median(one), statistics.median(ten)
    print(f"{name:<8} peak RSS --jobs 2 (KiB, medians of {len(one)}): 1x {m1:.0f}, 10x {m10:.0f} "
          f"({100 * (m10 / m1 - 1):+.1f}%)")
PY
fi
