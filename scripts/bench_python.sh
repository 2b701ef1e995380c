#!/usr/bin/env bash
# The Python Loader against `shardtool bench` on the same shards and the same cores: tar + JPEG
# decode, packed 256x256 raw batches (where a hidden copy would show; `shardtool bench` adds a
# one-thread memcpy of the same bytes), and webdataset + torchvision.io.decode_jpeg in a
# DataLoader with as many workers; Python overhead per batch and RSS after each epoch.
# Release builds; scripts/bench_python.py runs and summarises (medians of BENCH_RUNS runs).
#
#   scripts/bench_python.sh [INPUT_FOLDER]   default: bench-data/crops, else sample-data/imagefolder
#
# Environment: BENCH_CORES (default: all), BENCH_BATCH (default 64), BENCH_EPOCHS (default 20),
# BENCH_RUNS (default 3). Needs torch, torchvision and webdataset in python3.
set -euo pipefail
cd "$(dirname "$0")/.."

input="${1:-bench-data/crops}"
[ -d "$input" ] || input=sample-data/imagefolder
cores="${BENCH_CORES:-$(nproc)}"
batch="${BENCH_BATCH:-64}"
epochs="${BENCH_EPOCHS:-20}"
runs="${BENCH_RUNS:-3}"
work=target/bench/python
mkdir -p "$work"
python3 -c "import torch, torchvision, webdataset" || {
  echo "bench_python: python3 needs torch, torchvision and webdataset" >&2
  exit 1
}

# The CLI and the extension in one release build (one feature resolution, dependencies built
# once); the extension is staged with the Python sources as an importable package.
artifacts=$(PYO3_BUILD_EXTENSION_MODULE=1 cargo build --release --locked -p shardtool \
  -p shardtool-python --message-format=json-render-diagnostics)
read -r bin so < <(python3 -c '
import json, sys
found = {}
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact":
        if m["target"]["name"] == "shardtool" and m.get("executable"):
            found["bin"] = m["executable"]
        if m["target"]["name"] == "_shardtool":
            found["so"] = next(f for f in m["filenames"] if f.endswith(".so"))
print(found["bin"], found["so"])
' <<<"$artifacts")
rm -rf "$work/pkg" && mkdir -p "$work/pkg/shardtool"
cp python/shardtool/*.py python/shardtool/*.pyi python/shardtool/py.typed "$work/pkg/shardtool/"
cp "$so" "$work/pkg/shardtool/_shardtool.abi3.so"
export PYTHONPATH="$PWD/$work/pkg"
python3 -c 'import shardtool, sys; sys.exit(0 if shardtool.__file__.startswith(sys.argv[1]) else
  f"bench_python: shardtool imported from {shardtool.__file__}")' "$PYTHONPATH"

# Many tar shards, so every DataLoader worker of the peer has some (webdataset splits by shard).
"$bin" pack "$input" "$work/tar" --resize crop:224x224 --shard-samples 256 --overwrite --quiet
"$bin" pack "$input" "$work/packed" --format packed --resize crop:256x256 --overwrite --quiet
"$bin" pack "$input" "$work/tiny" --format packed --resize crop:8x8 --overwrite --quiet
cat "$work"/tar/* "$work"/packed/* "$work"/tiny/* >/dev/null

echo "input $input; $(nproc) cores, using $cores; batch $batch; $epochs epochs; $runs runs;" \
  "$(date -u +%FT%TZ); load average $(cut -d' ' -f1-3 /proc/loadavg)"
python3 scripts/bench_python.py --bin "$bin" --tar "$work/tar" --packed "$work/packed" \
  --tiny "$work/tiny" --batch "$batch" --cores "$cores" --epochs "$epochs" --runs "$runs"
