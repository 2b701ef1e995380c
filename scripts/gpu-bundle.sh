#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh runs into gpu-bundle/ (git-ignored), for a GPU machine that
# cannot reach a crate registry or has no Rust toolchain: the CUDA-capable shardtool, the h2d and
# device_bench examples and the conformance test binary, release builds, stripped. With
# gpu-bundle/ present, gpu-check.sh skips its build steps and runs these. cudarc loads CUDA at run
# time, so the bundle builds here without CUDA and runs on any x86-64 Linux with this glibc.
#
# Usage: scripts/gpu-bundle.sh   then carry gpu-bundle/ to the GPU machine beside the tree
#        (the device tool's `carry`: ["gpu-bundle"], which must stay under its 64 MiB limit).
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-bundle
features=(--release --locked --features cuda)
cargo build "${features[@]}" -p shardtool
cargo build "${features[@]}" -p shardtool-gpu --examples
# The test binary's path has a hash in it: ask cargo for it.
conformance=$(cargo test "${features[@]}" -p shardtool-gpu --test conformance --no-run \
  --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "conformance":
        print(m["executable"])')
[ -n "$conformance" ] || { echo "gpu-bundle: no conformance test binary" >&2; exit 1; }
rm -rf "$out" && mkdir -p "$out"
cp target/release/shardtool target/release/examples/h2d target/release/examples/device_bench "$out/"
cp "$conformance" "$out/conformance"
strip "$out"/*
git rev-parse HEAD > "$out/COMMIT"
bytes=$(du -sb "$out" | cut -f1)
echo "gpu-bundle: $(ls "$out" | tr '\n' ' ')($((bytes >> 20)) MiB) for commit $(cut -c1-12 "$out/COMMIT")"
[ "$bytes" -lt $((64 << 20)) ] || echo "gpu-bundle: warning: over the device tool's 64 MiB carry limit" >&2
