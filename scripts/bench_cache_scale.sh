#!/usr/bin/env bash
# The shard cache with many shards: a cold `shardtool read` of N tiny shards (default 10,000, one
# 16x16 PNG each) over loopback HTTP (lighttpd), without a cache limit, under a limit that holds
# every shard, and under one that holds a quarter of them (every fetch evicts). Prints the median
# of RUNS (default 3) alternating runs of each and its ratio to the run without a limit.
# BASE_BIN=/path/to/another/shardtool also times that build in the same rounds (before/after).
#
# Usage: scripts/bench_cache_scale.sh        (N=100000 RUNS=5 scripts/bench_cache_scale.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-10000}
RUNS=${RUNS:-3}
. scripts/loopback_http.sh
python3 - "$TMP/imgs/a" "$N" <<'PY'
import os, sys
from PIL import Image
os.makedirs(sys.argv[1])
im = Image.new("RGB", (16, 16), (10, 200, 30))
for i in range(int(sys.argv[2])):
    im.save(f"{sys.argv[1]}/{i}.png")
PY
$BIN pack "$TMP/imgs" "$TMP/www/ds" --shard-samples 1 -q
BYTES=$(du -sb "$TMP/www/ds" | cut -f1)
serve_folder "$TMP/www" ds/manifest.json
URL="http://127.0.0.1:$PORT/ds/"
echo "dataset: $N shards, $BYTES bytes, lighttpd on loopback; $(nproc) cores"

declare -A T
BINS=("new:$BIN")
[ -n "${BASE_BIN:-}" ] && BINS+=("base:$BASE_BIN")
for run in $(seq "$RUNS"); do
  for b in "${BINS[@]}"; do
    name=${b%%:*}; bin=${b#*:}
    for lim in none all quarter; do
      case $lim in
        none) args=() ;;
        all) args=(--cache-limit $((BYTES * 2))) ;;
        quarter) args=(--cache-limit $((BYTES / 4))) ;;
      esac
      rm -rf "$TMP/cache"
      t0=$(date +%s.%N)
      "$bin" read "$URL" --cache-dir "$TMP/cache" "${args[@]}" --limit $((N * 10)) >/dev/null 2>"$TMP/err" \
        || { cat "$TMP/err"; exit 1; }
      t1=$(date +%s.%N)
      T[$name.$lim]="${T[$name.$lim]:-} $(echo "$t1 - $t0" | bc)"
    done
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
for b in "${BINS[@]}"; do
  name=${b%%:*}
  base=$(echo "${T[$name.none]}" | median)
  for lim in none all quarter; do
    m=$(echo "${T[$name.$lim]}" | median)
    printf '%-5s %-8s median %7.2f s  (%.2fx the run without a limit)  runs:%s\n' \
      "$name" "$lim" "$m" "$(echo "$m / $base" | bc -l)" "${T[$name.$lim]}"
  done
done
