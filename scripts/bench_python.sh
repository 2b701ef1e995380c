#!/usr/bin/env bash
# The Python Loader against `shardtool bench` on the same shards and the same cores: tar + JPEG
# decode, and packed 256x256 raw batches (where a hidden copy would show), plus webdataset +
# torchvision.io.decode_jpeg in a DataLoader when both are installed. Release builds.
#
#   scripts/bench_python.sh [INPUT_FOLDER]   default: bench-data/crops, else sample-data/imagefolder
#
# Environment: BENCH_CORES (default: all), BENCH_BATCH (default 64), BENCH_EPOCHS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."

input="${1:-bench-data/crops}"
[ -d "$input" ] || input=sample-data/imagefolder
cores="${BENCH_CORES:-$(nproc)}"
batch="${BENCH_BATCH:-64}"
epochs="${BENCH_EPOCHS:-3}"
work=target/bench/python
mkdir -p "$work"

cargo build --release -p shardtool --locked --quiet
VENV=target/python-venv
[ -x "$VENV/bin/python" ] || python3 -m venv --system-site-packages "$VENV"
VIRTUAL_ENV="$PWD/$VENV" PATH="$PWD/$VENV/bin:$PATH" \
  maturin develop --release --quiet --manifest-path python/Cargo.toml
bin=target/release/shardtool
"$bin" pack "$input" "$work/tar" --resize crop:224x224 --overwrite --quiet
"$bin" pack "$input" "$work/packed" --format packed --resize crop:256x256 --overwrite --quiet

echo "input $input; $cores cores; batch $batch; $epochs epochs; $(date -u +%FT%TZ)"
for ds in tar packed; do
  decode=""; [ "$ds" = tar ] && decode="--decode"
  echo "== $ds: shardtool bench"
  "$bin" bench "$work/$ds" --batch "$batch" --workers "$cores" --epochs "$epochs" $decode
  echo "== $ds: shardtool.Loader (torch output)"
  "$VENV/bin/python" - "$work/$ds" "$batch" "$cores" "$epochs" <<'PY'
import sys, time, resource
import shardtool
path, batch, cores, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
loader = shardtool.Loader(path, batch_size=batch, workers=cores, seed=0)
n, t0 = 0, time.perf_counter()
rss = []
for e in range(epochs):
    loader.set_epoch(e)
    for b in loader:
        n += len(b["key"])
    rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
dt = time.perf_counter() - t0
print(f"samples/s {n / dt:.0f}  ({n} samples, {dt:.2f} s); max RSS per epoch (KiB) {rss}")
PY
done
if "$VENV/bin/python" -c "import webdataset, torchvision" 2>/dev/null; then
  echo "== tar: webdataset + torchvision.io.decode_jpeg, DataLoader num_workers=$cores"
  "$VENV/bin/python" - "$work/tar" "$batch" "$cores" <<'PY'
import glob, sys, time
import torch, torchvision.io, webdataset as wds
path, batch, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
shards = sorted(glob.glob(f"{path}/*.tar"))
def decode(s):
    return torchvision.io.decode_jpeg(torch.frombuffer(bytearray(s["jpg"]), dtype=torch.uint8)), int(s["cls"])
ds = wds.WebDataset(shards, shardshuffle=False, nodesplitter=wds.split_by_node).map(decode).batched(batch)
dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=cores)
n, t0 = 0, time.perf_counter()
for imgs, labels in dl:
    n += len(labels)
dt = time.perf_counter() - t0
print(f"samples/s {n / dt:.0f}  ({n} samples, {dt:.2f} s)")
PY
else
  echo "(webdataset or torchvision not installed: peer run skipped)"
fi
