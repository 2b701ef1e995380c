#!/usr/bin/env bash
# Reader benchmark: fixed-shape packed batches from page cache through the whole loader against a
# one-thread memcpy of the same bytes; tar + JPEG decode per core; data wait beside a simulated
# step. Uses bench-data/crops (scripts/make_bench_data.sh), listed 4 times for a longer run.
#
# Usage: scripts/bench_read.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CROPS=bench-data/crops
[ -d "$CROPS" ] || scripts/make_bench_data.sh
cargo build --release -q -p shardtool
BIN=target/release/shardtool
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
scripts/list_repeated.py "$CROPS" "$TMP/list.csv" 4
$BIN pack --list "$TMP/list.csv" "$TMP/packed" --resize crop:256x256 --format packed --shard-size 64MiB -q
$BIN pack --list "$TMP/list.csv" "$TMP/wds" --resize shorter:256 --quality 90 --shard-size 64MiB -q
cat "$TMP"/packed/* "$TMP"/wds/* >/dev/null

echo "== packed 256x256x3, batch 256, 1 worker (page cache) =="
$BIN bench "$TMP/packed" --batch 256 --workers 1
$BIN bench "$TMP/packed" --batch 256 --workers 1
echo "== tar + JPEG decode, batch 64, 1 and 2 workers =="
$BIN bench "$TMP/wds" --batch 64 --workers 1 --decode
$BIN bench "$TMP/wds" --batch 64 --workers 2 --decode
echo "== data wait beside a simulated step (loader alone about 2x faster than the step) =="
alone=$($BIN bench "$TMP/wds" --batch 64 --workers 2 --decode | awk '/^loader alone/ {print $4}')
step=$(python3 -c "print(round(2 * 64 / float('$alone') * 1000, 1))")
echo "loader alone: $alone samples/s -> step ${step} ms per batch of 64"
$BIN bench "$TMP/wds" --batch 64 --workers 2 --decode --step-ms "$step"
