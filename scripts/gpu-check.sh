#!/usr/bin/env bash
# GPU check for issue 7, for a machine with an NVIDIA GPU and driver (no internet needed).
#
# Usage:  scripts/gpu-check.sh [--device cuda:N] [--copies N] [--crop WxH] [--batch N]
#
# 1. builds the GPU-capable binary and examples (cargo --offline, --features cuda, release), or,
#    when gpu-bundle/ exists (scripts/gpu-bundle.sh, built elsewhere), uses the binaries in it
# 2. runs the conformance tests against CPU and GPU (SHARDTOOL_GPU_TESTS=1)
# 3. measures plain host-to-device bandwidth, pinned vs pageable (examples/h2d.rs)
# 4. packs a dataset from sample-data/imagefolder (copied N times, crop WxH, --format packed)
# 5. runs the device loader end to end (examples/device_bench.rs): flat out (delivered GB/s)
#    and at a simulated 100 ms step (data wait p50/p99), on the GPU and on the CPU twin
# All results go to one file: $OUT/gpu-check-results.txt when OUT is set, else
# ./gpu-check-results.txt. Every step has a timeout; the whole run stays under 8 minutes.
# Without a GPU it still runs: the GPU steps record why they failed and the CPU rows are kept.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root" || exit 1

device="cuda:0"
copies=40
crop="512x512"
batch=32
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --copies) copies="$2"; shift 2 ;;
    --crop) crop="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT" && results="$OUT/gpu-check-results.txt"
else
  results="$root/gpu-check-results.txt"
fi
: > "$results" || { echo "gpu-check: cannot write $results" >&2; exit 1; }

log() { echo "$*" | tee -a "$results"; }
deadline=$((SECONDS + 470))   # 7 min 50 s for everything
left() { local l=$((deadline - SECONDS)); [ "$l" -gt 5 ] && echo "$l" || echo 5; }
# step NAME SECONDS CMD...: runs CMD with a timeout capped by the time left, output to the file.
failed=0
step() {
  local name="$1" limit="$2"; shift 2
  local l; l=$(left); [ "$limit" -gt "$l" ] && limit="$l"
  log ""
  log "== $name (timeout ${limit}s)"
  log "\$ $*"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >>"$results" 2>&1
  local rc=$?
  [ "$rc" -eq 124 ] && log "TIMED OUT after ${limit}s"
  log "-- $name: rc=$rc in $((SECONDS - t0))s"
  [ "$rc" -ne 0 ] && failed=$((failed + 1))
  return "$rc"
}

bundle="$root/gpu-bundle"
if [ -x "$bundle/conformance" ] && [ -x "$bundle/shardtool" ]; then
  use_bundle=1
elif ! command -v cargo >/dev/null 2>&1; then
  log "gpu-check: cargo not found on PATH and no gpu-bundle/; install a Rust toolchain (rust-version in Cargo.toml) or build the bundle elsewhere with scripts/gpu-bundle.sh"
  exit 1
else
  use_bundle=0
fi
threads=$(nproc 2>/dev/null || echo 4)
workers=$(( threads > 8 ? 8 : threads ))

log "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
log "host: $(uname -srm), $threads cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo 2>/dev/null)"
if [ "$use_bundle" = 1 ]; then
  log "binaries: gpu-bundle/ built for commit $(cat "$bundle/COMMIT" 2>/dev/null || echo unknown)"
else
  log "cargo: $(cargo --version 2>&1)"
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader >>"$results" 2>&1 \
    || log "nvidia-smi failed"
else
  log "nvidia-smi not found (no NVIDIA driver utilities on PATH)"
fi
export CARGO_NET_OFFLINE="${CARGO_NET_OFFLINE:-true}"

# 1. build, release only. The test build comes first and the test run below repeats the same
#    command (without --no-run), so nothing is compiled twice inside the test timeout.
if [ "$use_bundle" = 1 ]; then
  tests=("$bundle/conformance")
  bin="$bundle/shardtool"
  ex="$bundle"
else
  tests=(cargo test --release -p shardtool-gpu --features cuda)
  if ! step "build tests" 240 "${tests[@]}" --no-run \
    || ! step "build examples" 120 cargo build --release -p shardtool-gpu --features cuda --examples \
    || ! step "build shardtool" 180 cargo build --release -p shardtool --features cuda; then
    log "gpu-check: build failed; see above"
    exit 1
  fi
  bin="$root/target/release/shardtool"
  ex="$root/target/release/examples"
fi

# 2. conformance tests, CPU twin and GPU
step "tests (CPU twin + cuda:0)" 120 env SHARDTOOL_GPU_TESTS=1 "${tests[@]}"

# 3. plain copy bandwidth: a large copy and a batch-sized one
step "h2d 256 MiB" 60 "$ex/h2d" --device "$device" --mib 256 --iters 20
step "h2d batch-sized" 60 "$ex/h2d" --device "$device" \
  --mib $(( ( ${crop%x*} * ${crop#*x} * 3 * batch + (1<<20) - 1 ) >> 20 )) --iters 50

# 4. dataset: sample-data copied $copies times, cropped to $crop, packed
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
for c in $(seq 1 "$copies"); do
  for cls in sample-data/imagefolder/*/; do
    name=$(basename "$cls"); mkdir -p "$work/img/$name"
    for f in "$cls"*; do cp "$f" "$work/img/$name/c${c}_$(basename "$f")"; done
  done
done
log ""
log "dataset: $(find "$work/img" -type f | wc -l) images from sample-data/imagefolder x $copies"
step "pack" 120 "$bin" pack "$work/img" "$work/packed" --format packed \
  --resize "crop:$crop" --upscale --shard-size 256MiB
data="$work/packed"

# 5. the loader end to end: flat out, then at a simulated 100 ms step; GPU, then CPU twin
common=(--batch "$batch" --workers "$workers" --in-flight 2)
step "loader $device flat out" 60 "$ex/device_bench" "$data" --device "$device" "${common[@]}" --epochs 3
step "loader $device 100 ms step" 90 "$ex/device_bench" "$data" --device "$device" "${common[@]}" --epochs 1 --step-ms 100
step "loader $device 100 ms step + normalise" 90 "$ex/device_bench" "$data" --device "$device" "${common[@]}" --epochs 1 --step-ms 100 --normalize
step "loader cpu flat out" 60 "$ex/device_bench" "$data" --device cpu "${common[@]}" --epochs 3
step "loader auto 100 ms step" 90 "$ex/device_bench" "$data" --device auto "${common[@]}" --epochs 1 --step-ms 100

# Summary: loader-delivered GB/s against pinned bandwidth, p99 against 1 ms.
pinned=$(grep -m1 -o 'pinned_gb_s=[0-9.]*' "$results" | cut -d= -f2)
flat=$(grep "^loader target=\"cuda" "$results" | head -1 | grep -o 'delivered_gb_s=[0-9.]*' | cut -d= -f2)
p99=$(grep "^loader target=\"cuda" "$results" | grep 'step_ms=100.0' | head -1 | grep -o 'wait_p99_ms=[0-9.]*' | cut -d= -f2)
log ""
log "== summary"
if [ -n "$pinned" ] && [ -n "$flat" ]; then
  log "loader delivered ${flat} GB/s = $(awk -v a="$flat" -v b="$pinned" 'BEGIN {printf "%.0f", 100*a/b}')% of pinned copy ${pinned} GB/s (target >= 85%)"
else
  log "no GPU figures (see the failed steps above)"
fi
[ -n "$p99" ] && log "data wait p99 at 100 ms step: ${p99} ms (target < 1 ms)"
log "failed steps: $failed; total ${SECONDS}s; results in $results"
[ "$failed" -eq 0 ]
