#!/usr/bin/env bash
# Builds or runs the cargo-fuzz targets in fuzz/ (see fuzz/README.md).
#
#   scripts/fuzz.sh build            compile and link every target, unoptimised (CI: keeps them from
#                                    rotting in a few minutes; FUZZ_PROFILE=release for the real build)
#   scripts/fuzz.sh run SECONDS      build optimised, then fuzz each target for SECONDS from fuzz/seeds
#   scripts/fuzz.sh replay           build optimised, run every seed and saved regression once
#
# Works on the stable toolchain: cargo-fuzz passes nightly-only rustc flags (-Zsanitizer, sancov
# passes), which RUSTC_BOOTSTRAP=1 unlocks. Environment:
#   FUZZ_SANITIZER   address (default) or none (faster, finds panics and aborts only)
#   FUZZ_PROFILE     dev or release: the build of `build` (default dev; run and replay use release)
#   FUZZ_TARGETS     space-separated subset of targets (default: all)
#   FUZZ_RSS_MB      libFuzzer -rss_limit_mb (default 2048)
#   FUZZ_JOBS        cargo build jobs (default: cargo's own)
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION="0.13.2"
ALL_TARGETS="packed_open wds_tar manifest image_transform crop"
TARGETS="${FUZZ_TARGETS:-$ALL_TARGETS}"
SANITIZER="${FUZZ_SANITIZER:-address}"
RSS_MB="${FUZZ_RSS_MB:-2048}"

# Fuzzing uses release builds with debug assertions and overflow checks (arithmetic overflow on
# hostile input is a bug). `build` defaults to cargo-fuzz's dev build: the same code, instrumented
# and linked against libFuzzer the same way, in about a third of the CPU time (no LLVM
# optimisation at one codegen unit), which is all CI needs to know the targets still compile.
FLAGS=(--release --debug-assertions --sanitizer "$SANITIZER")
case "${FUZZ_PROFILE:-dev}" in
  dev) BUILD_FLAGS=(--dev --sanitizer "$SANITIZER") ;;
  release) BUILD_FLAGS=("${FLAGS[@]}") ;;
  *) echo "FUZZ_PROFILE must be dev or release" >&2; exit 2 ;;
esac
if [ -n "${FUZZ_JOBS:-}" ]; then
  export CARGO_BUILD_JOBS="$FUZZ_JOBS"
fi
export RUSTC_BOOTSTRAP=1

usage() {
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

ensure_cargo_fuzz() {
  if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "==> installing cargo-fuzz $CARGO_FUZZ_VERSION" >&2
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
  fi
}

seed_corpus() {
  local t
  for t in $TARGETS; do
    mkdir -p "fuzz/corpus/$t"
    if [ -d "fuzz/seeds/$t" ]; then
      cp -n "fuzz/seeds/$t"/* "fuzz/corpus/$t"/ 2>/dev/null || true
    fi
  done
}

build() {
  local flags=("$@")
  echo "==> cargo fuzz build ${flags[*]}" >&2
  # One cargo invocation builds every target: shared dependencies compile once.
  if [ "$TARGETS" = "$ALL_TARGETS" ]; then
    cargo fuzz build "${flags[@]}"
  else
    local t
    for t in $TARGETS; do cargo fuzz build "${flags[@]}" "$t"; done
  fi
}

run() {
  local seconds="$1" t failed=()
  for t in $TARGETS; do
    echo "==> fuzzing $t for ${seconds}s" >&2
    if ! cargo fuzz run "${FLAGS[@]}" "$t" -- \
        -max_total_time="$seconds" -rss_limit_mb="$RSS_MB" -timeout=30 -print_final_stats=1; then
      failed+=("$t")
    fi
  done
  if [ "${#failed[@]}" -gt 0 ]; then
    echo "==> crashes in: ${failed[*]}" >&2
    echo "    inputs are in fuzz/artifacts/<target>/; copy each to fuzz/regressions/<target>/," >&2
    echo "    reproduce with: RUSTC_BOOTSTRAP=1 cargo fuzz run ${FLAGS[*]} <target> <file>" >&2
    return 1
  fi
}

replay() {
  local t dirs failed=()
  for t in $TARGETS; do
    dirs=()
    for d in "fuzz/seeds/$t" "fuzz/regressions/$t"; do
      if [ -d "$d" ] && [ -n "$(ls -A "$d")" ]; then dirs+=("$d"); fi
    done
    [ "${#dirs[@]}" -gt 0 ] || continue
    echo "==> replaying ${dirs[*]}" >&2
    # -runs=0 executes each given input once and does not fuzz or write new inputs.
    if ! cargo fuzz run "${FLAGS[@]}" "$t" "${dirs[@]}" -- -runs=0 -rss_limit_mb="$RSS_MB"; then
      failed+=("$t")
    fi
  done
  if [ "${#failed[@]}" -gt 0 ]; then
    echo "==> failing inputs in: ${failed[*]}" >&2
    return 1
  fi
}

case "${1:-}" in
  build)
    ensure_cargo_fuzz
    seed_corpus
    build "${BUILD_FLAGS[@]}"
    ;;
  run)
    [[ "${2:-}" =~ ^[0-9]+$ ]] || usage
    ensure_cargo_fuzz
    seed_corpus
    build "${FLAGS[@]}"
    run "$2"
    ;;
  replay)
    ensure_cargo_fuzz
    build "${FLAGS[@]}"
    replay
    ;;
  *) usage ;;
esac
