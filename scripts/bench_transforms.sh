#!/usr/bin/env bash
# Train-time crops on the same tar shards (shorter side 256, JPEG q90) and the same cores, in one
# run: our loader with random-resized-crop:224 and flip (region decode), the same build decoding
# whole JPEGs and cropping afterwards, and torchvision's ImageNet recipe (decode_jpeg +
# RandomResizedCrop(224, antialias=True) + RandomHorizontalFlip) in a DataLoader over
# webdataset; then our data wait beside a simulated step twice as long as the loader needs.
# Prints medians of RUNS runs and the ratios.
#
#   scripts/bench_transforms.sh [INPUT_FOLDER]   default bench-data/crops (make_bench_data.sh)
#
# The input is listed 4 times (16,000 samples from the default 4,000 photos), so an epoch is
# 250 batches of 64 and the data-wait p99 is a steady-state figure, not the epoch's first batch.
# Environment: BENCH_CORES (default: all), BENCH_RUNS (default 3), BENCH_EPOCHS (default 1),
# SHARDTOOL (a built binary to use instead of building target/release/shardtool).
# FFCV is not run: it is published as a source package only, and building it needs system OpenCV
# found by pkg-config (`pip install ffcv` fails with "Could not find required package: opencv4").
set -euo pipefail
cd "$(dirname "$0")/.."

input="${1:-bench-data/crops}"
[ -d "$input" ] || { echo "no $input: run scripts/make_bench_data.sh" >&2; exit 2; }
cores="${BENCH_CORES:-$(nproc)}"
runs="${BENCH_RUNS:-3}"
epochs="${BENCH_EPOCHS:-1}"
batch=64
python3 -c "import torch, torchvision, webdataset" || {
  echo "needs torch, torchvision and webdataset in python3" >&2; exit 2; }
bin="${SHARDTOOL:-target/release/shardtool}"
[ -n "${SHARDTOOL:-}" ] || cargo build --release -q -p shardtool --locked
work=target/bench/transforms
mkdir -p "$work"
scripts/list_repeated.py "$input" "$work/list.csv" 4
"$bin" pack --list "$work/list.csv" "$work/tar" --resize shorter:256 --quality 90 \
  --shard-size 8MiB --overwrite -q
cat "$work"/tar/* >/dev/null
samples=$(python3 -c "import json; print(json.load(open('$work/tar/manifest.json'))['totals']['samples'])")
echo "input $input: $samples samples, shorter side 256, q90; $cores cores; batch $batch;" \
  "$epochs epochs per run; median of $runs runs; $(date -u +%FT%TZ)"

ours() { # samples/s of `shardtool bench` with extra flags
  "$bin" bench "$work/tar" --batch "$batch" --workers "$cores" --epochs "$epochs" \
    --transform random-resized-crop:224 --flip "$@" | awk '/^loader alone/ {print $4}'
}

torchvision_recipe() {
  python3 - "$work/tar" "$batch" "$cores" "$epochs" <<'PY'
import glob, sys, time
import torch, torchvision.io, webdataset as wds
from torchvision.transforms import v2
path, batch, cores, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
shards = sorted(glob.glob(f"{path}/*.tar"))
crop = v2.RandomResizedCrop(224, antialias=True)
flip = v2.RandomHorizontalFlip()

def recipe(s):
    img = torchvision.io.decode_jpeg(torch.frombuffer(bytearray(s["jpg"]), dtype=torch.uint8))
    return flip(crop(img)), int(s["cls"])

ds = (wds.WebDataset(shards, shardshuffle=False, nodesplitter=wds.split_by_node,
                     workersplitter=wds.split_by_worker)
      .map(recipe).batched(batch))
dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=cores)
n, t0 = 0, time.perf_counter()
for _ in range(epochs):
    for imgs, labels in dl:
        assert imgs.shape[1:] == (3, 224, 224)
        n += len(labels)
print(f"{n / (time.perf_counter() - t0):.0f}")
PY
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

fused=(); full=(); tv=()
for _ in $(seq "$runs"); do
  fused+=("$(ours)")
  full+=("$(ours --no-region-decode)")
  tv+=("$(torchvision_recipe)")
done
f=$(printf '%s\n' "${fused[@]}" | median)
u=$(printf '%s\n' "${full[@]}" | median)
t=$(printf '%s\n' "${tv[@]}" | median)
echo "samples/s (runs: ${fused[*]} | ${full[*]} | ${tv[*]})"
printf '%-48s %8.0f\n' "shardtool random-resized-crop:224 --flip" "$f"
printf '%-48s %8.0f\n' "shardtool, whole-JPEG decode then crop" "$u"
printf '%-48s %8.0f\n' "torchvision recipe in a DataLoader" "$t"
python3 -c "print(f'region decode vs whole decode: {$f / $u:.2f}x; vs torchvision: {$f / $t:.2f}x')"

step=$(python3 -c "print(round(2 * $batch / $f * 1000, 2))")
echo "== data wait beside a ${step} ms step per batch (twice the loader's time) =="
"$bin" bench "$work/tar" --batch "$batch" --workers "$cores" --epochs "$epochs" \
  --transform random-resized-crop:224 --flip --step-ms "$step"
