#!/usr/bin/env bash
# The project's test command (README): formatting, lints (which compile the benchmarks and examples
# too), docs, the fuzz crate's lock file, and every test (the fuzz corpora replayed among them).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "the reader without its default features (local datasets only: no HTTP, S3, TLS or async runtime)"
cargo clippy -p shardtool-reader --no-default-features --lib --locked -- -D warnings
step "inspect and verify without their remote feature"
cargo clippy -p shardtool-inspect -p shardtool-verify --lib --locked -- -D warnings

step "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

# The fuzz crate is outside the workspace; its targets are one line over crates/fuzz-checks, whose
# tests replay every committed input and check the targets' text. Here: its lock file is current.
step "fuzz crate: lock file up to date (scripts/fuzz.sh builds and runs the targets)"
cargo metadata --manifest-path fuzz/Cargo.toml --locked --format-version 1 >/dev/null

step "cargo test"
cargo test --workspace --locked

step "python package: build into target/python-venv, pytest"
scripts/python-test.sh

step "python package: mypy --strict (the typed package and its stubs)"
(cd python && python3 -m mypy --strict --cache-dir=/dev/null -p shardtool)

# The GPU-capable build (CUDA loaded at run time) must build, lint clean and pass its CPU path
# where no GPU exists; on a GPU machine scripts/gpu-check.sh runs the GPU-gated tests.
step "cuda feature: clippy, gpu conformance tests and the CLI's device tests (CPU path)"
cargo clippy -p shardtool-gpu -p shardtool --features shardtool/cuda --all-targets --locked -- -D warnings
cargo test -p shardtool-gpu --features cuda --locked --test conformance
cargo test -p shardtool --features cuda --locked --test it -- read::
