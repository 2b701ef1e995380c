#!/usr/bin/env bash
# Builds the CLI for x86_64-unknown-linux-musl (a static-pie binary) and checks that it sees its
# arguments and packs and verifies the sample dataset. Needs the target (`rustup target add
# x86_64-unknown-linux-musl`) and musl-gcc (Debian: `apt-get install musl-tools`) for the C
# codecs. Not part of CI: a second full build of the dependency tree.
#
# Usage: scripts/musl-check.sh   (MUSL_TARGET_DIR: build folder, default target/musl)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${MUSL_TARGET_DIR:-target/musl}
export CC_x86_64_unknown_linux_musl=${CC_x86_64_unknown_linux_musl:-musl-gcc}
cargo build -p shardtool --locked --target x86_64-unknown-linux-musl --target-dir "$DIR"
BIN="$DIR/x86_64-unknown-linux-musl/debug/shardtool"
file "$BIN"
readelf -h "$BIN" | grep -q 'DYN' || { echo "not position-independent" >&2; exit 1; }
"$BIN" --version
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
"$BIN" pack sample-data/imagefolder "$OUT/ds" --resize shorter:64 --jobs 1
"$BIN" verify "$OUT/ds"
echo "musl build: arguments seen, sample packed and verified"
