#!/usr/bin/env bash
# Packed-shard batch assembly vs memcpy, and PackedShard::open time vs shard size
# (formats/packed/benches/batch_read.rs). Runs in release mode on one thread and keeps a copy of
# the output, headed by the command, the commit and the CPU.
#
#   scripts/bench_packed_read.sh [OUTPUT]     default OUTPUT: target/bench/packed_read.txt
#
# Environment: BENCH_RECORDS (default 2048 records of 256x256x3, about 400 MB; needs about twice
# that in free memory and temporary disk), BENCH_BATCH (default 256), BENCH_TMPDIR.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-target/bench/packed_read.txt}"
mkdir -p "$(dirname "$out")"

cargo bench -p shardtool-packed --bench batch_read --no-run --locked --quiet
{
  echo "command: BENCH_RECORDS=${BENCH_RECORDS:-2048} BENCH_BATCH=${BENCH_BATCH:-256} cargo bench -p shardtool-packed --bench batch_read"
  echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "cpu:     $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1) ($(nproc) cpus online)"
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  cargo bench -p shardtool-packed --bench batch_read --locked --quiet
} 2>&1 | tee "$out"
echo "saved to $out" >&2
