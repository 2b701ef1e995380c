#!/usr/bin/env bash
# Build the benchmark input set: N random 400x350 JPEG q90 crops of real photos
# in ImageFolder layout (bench-data/crops/<class>/<nnnnn>.jpg).
#
# Usage:
#   scripts/make_bench_data.sh [DEB_CACHE_DIR] [options]
#
#   DEB_CACHE_DIR / --debs DIR   where the .deb files are downloaded and cached
#                                (default: bench-data/debs)
#   --unpacked DIR               use packages already extracted into DIR
#                                (dpkg-deb -x); skips download and unpacking
#   --out DIR                    output ImageFolder (default: bench-data/crops)
#   --count N                    number of crops (default: 1000)
#   --seed S                     random seed (default: 0)
#
# Without --unpacked it runs `apt-get download mate-backgrounds opencv-doc`
# in the cache folder (skipped when a matching .deb is already there; no root
# needed) and extracts both packages into DEB_CACHE_DIR/../unpacked with
# dpkg-deb -x.  The crops use the photographs of mate-backgrounds only (see
# scripts/make_bench_crops.py); opencv-doc is fetched as well so that the same
# cache can regenerate sample-data/ (scripts/make_sample_data.py).
# Relative default paths are resolved against the repository root; paths given
# on the command line are relative to the current directory.  bench-data/ is
# git-ignored.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

debs="$root/bench-data/debs"
unpacked=""
out="$root/bench-data/crops"
count=1000
seed=0
python="${PYTHON:-python3}"

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --debs) debs="$2"; shift 2 ;;
    --unpacked) unpacked="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --count) count="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    *) debs="$1"; shift ;;
  esac
done

if [ -z "$unpacked" ]; then
  mkdir -p "$debs"
  debs="$(cd "$debs" && pwd)"
  for pkg in mate-backgrounds opencv-doc; do
    if compgen -G "$debs/${pkg}_*.deb" >/dev/null; then
      echo "using cached $(ls "$debs"/${pkg}_*.deb | tail -n1)" >&2
    else
      echo "downloading $pkg into $debs" >&2
      (cd "$debs" && apt-get download "$pkg")
    fi
  done
  unpacked="$(dirname "$debs")/unpacked"
  mkdir -p "$unpacked"
  for deb in "$debs"/mate-backgrounds_*.deb "$debs"/opencv-doc_*.deb; do
    stamp="$unpacked/.$(basename "$deb").done"
    if [ ! -e "$stamp" ]; then
      echo "unpacking $(basename "$deb")" >&2
      dpkg-deb -x "$deb" "$unpacked"
      touch "$stamp"
    fi
  done
fi

"$python" "$here/make_bench_crops.py" "$out" --unpacked "$unpacked" \
  --count "$count" --seed "$seed"

n=$(find "$out" -mindepth 2 -maxdepth 2 -name '*.jpg' | wc -l)
echo "$out: $n images in $(find "$out" -mindepth 1 -maxdepth 1 -type d | wc -l) classes" >&2
