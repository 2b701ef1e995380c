#!/usr/bin/env bash
# The project's test command (README): formatting, lints, docs, every test, and a compile of the
# benchmarks and fuzz targets so they cannot rot.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

step "benchmarks compile"
cargo bench --workspace --no-run --locked --quiet

if [ -x scripts/fuzz.sh ] && [ "${SHARDTOOL_SKIP_FUZZ_BUILD:-0}" != 1 ]; then
  step "fuzz targets compile"
  scripts/fuzz.sh build
fi

step "cargo test"
cargo test --workspace --locked

step "python package: build into target/python-venv, pytest"
scripts/python-test.sh

# The GPU-capable build (CUDA loaded at run time) must build, lint clean and pass its CPU path
# where no GPU exists; on a GPU machine scripts/gpu-check.sh runs the GPU-gated tests.
step "cuda feature: clippy, gpu conformance tests and the CLI's device tests (CPU path)"
cargo clippy -p shardtool-gpu -p shardtool --features shardtool/cuda --all-targets --locked -- -D warnings
cargo test -p shardtool-gpu -p shardtool --features shardtool/cuda --locked --test conformance --test read
