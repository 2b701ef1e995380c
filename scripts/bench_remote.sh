#!/usr/bin/env bash
# Remote-reading benchmark over loopback HTTP (lighttpd), against curl and against local disk:
#   cold: `shardtool cache prefetch` (1 and 4 at once) and a cold `shardtool read`, each from an
#         empty cache folder, beside curl fetching the same shards one after another to files;
#   warm: `shardtool bench --epochs 10` of the URL with every shard cached, beside the same bench
#         of the local folder (both page-cached); each epoch opens the dataset again.
# Runs alternate and repeat RUNS times (default 3); medians and ratios are printed.
# Uses bench-data/crops (scripts/make_bench_data.sh), listed 4 times: ~800 MB of packed shards.
#
# Usage: scripts/bench_remote.sh            (RUNS=5 scripts/bench_remote.sh for more runs)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
CROPS=bench-data/crops
[ -d "$CROPS" ] || scripts/make_bench_data.sh
. scripts/loopback_http.sh
scripts/list_repeated.py "$CROPS" "$TMP/list.csv" 4
mkdir -p "$TMP/www"
$BIN pack --list "$TMP/list.csv" "$TMP/www/ds" --resize crop:256x256 --format packed --shard-size 64MiB -q
serve_folder "$TMP/www" ds/manifest.json webdav
URL="http://127.0.0.1:$PORT/ds/"
SHARDS=$(python3 -c "import json; print(' '.join(s['file'] for s in json.load(open('$TMP/www/ds/manifest.json'))['shards']))")
BYTES=$(python3 -c "import json; print(sum(s['bytes'] for s in json.load(open('$TMP/www/ds/manifest.json'))['shards']))")
cat "$TMP"/www/ds/* >/dev/null
echo "dataset: $(echo $SHARDS | wc -w) packed shards, $BYTES bytes, served by lighttpd on loopback; $(nproc) cores"

now() { date +%s.%N; }
declare -A T
add() { T[$1]="${T[$1]:-} $2"; }
for run in $(seq "$RUNS"); do
  rm -rf "$TMP/curl"; mkdir -p "$TMP/curl"; sync
  t0=$(now); for s in $SHARDS; do curl -sf "$URL$s" -o "$TMP/curl/$s"; done; t1=$(now)
  add curl_files "$(echo "$t1 - $t0" | bc)"
  t0=$(now); for s in $SHARDS; do curl -sf "$URL$s" -o /dev/null; done; t1=$(now)
  add curl_null "$(echo "$t1 - $t0" | bc)"
  rm -rf "$TMP/curl"
  for c in 1 4; do
    rm -rf "$TMP/cache"; sync
    t0=$(now); $BIN cache prefetch "$URL" --cache-dir "$TMP/cache" --fetch-concurrency $c >/dev/null; t1=$(now)
    add "prefetch_c$c" "$(echo "$t1 - $t0" | bc)"
  done
  rm -rf "$TMP/cache"; sync
  t0=$(now); $BIN read "$URL" --cache-dir "$TMP/cache" --batch 256 --workers 1 >/dev/null 2>&1; t1=$(now)
  add cold_read "$(echo "$t1 - $t0" | bc)"
  # Warm: every shard cached (from the cold read) and page-cached, against the local folder.
  cat "$TMP"/cache/*/shards/* >/dev/null
  # Three alternating pairs: single bench runs of either kind swing by 10-20% on a busy machine.
  ws="" ls=""
  for _ in 1 2 3; do
    w=$($BIN bench "$URL" --cache-dir "$TMP/cache" --batch 256 --workers 1 --epochs 10 2>/dev/null | awk '/^loader alone/ {print $5}')
    l=$($BIN bench "$TMP/www/ds" --batch 256 --workers 1 --epochs 10 2>/dev/null | awk '/^loader alone/ {print $5}')
    add warm_mbs "$w"; add local_mbs "$l"; ws="$ws $w"; ls="$ls $l"
  done
  echo "run $run: curl ${T[curl_files]##* } s, prefetch x1 ${T[prefetch_c1]##* } s, x4 ${T[prefetch_c4]##* } s, cold read ${T[cold_read]##* } s, warm MB/s$ws, local MB/s$ls"
done
python3 - "$BYTES" <<PY
import statistics as st, sys
b = int(sys.argv[1])
t = {k: [float(x) for x in v.split()] for k, v in {
  "curl_files": "${T[curl_files]}", "curl_null": "${T[curl_null]}",
  "prefetch_c1": "${T[prefetch_c1]}", "prefetch_c4": "${T[prefetch_c4]}",
  "cold_read": "${T[cold_read]}", "warm_mbs": "${T[warm_mbs]}", "local_mbs": "${T[local_mbs]}"}.items()}
m = {k: st.median(v) for k, v in t.items()}
mbs = lambda s: b / s / 1e6
print(f"\nmedians of {len(t['curl_files'])} runs (warm and local: {len(t['warm_mbs'])} benches each)")
print(f"curl one after another, to files    {mbs(m['curl_files']):8.0f} MB/s")
print(f"curl one after another, to /dev/null {mbs(m['curl_null']):8.0f} MB/s")
for k, name in [("prefetch_c1", "cache prefetch, 1 at a time"), ("prefetch_c4", "cache prefetch, 4 at a time"), ("cold_read", "read, cold cache")]:
    print(f"{name:<36} {mbs(m[k]):8.0f} MB/s  = {m['curl_files']/m[k]*100:4.0f}% of curl to files")
print(f"warm cache bench (loader alone)      {m['warm_mbs']:8.0f} MB/s  = {m['warm_mbs']/m['local_mbs']*100:4.0f}% of local ({m['local_mbs']:.0f} MB/s)")
PY
