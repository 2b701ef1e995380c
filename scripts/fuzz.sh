#!/usr/bin/env bash
# Builds or runs the cargo-fuzz targets in fuzz/ (see fuzz/README.md).
#
#   scripts/fuzz.sh build            compile and link every target, unoptimised (CI: keeps them from
#                                    rotting in a few minutes; FUZZ_PROFILE=release for the real build)
#   scripts/fuzz.sh run SECONDS [RUNS]  build optimised, then fuzz each target for SECONDS (or RUNS
#                                    executions, whichever ends first) from the seeds and corpus
#   scripts/fuzz.sh minimise         merge what runs found into the committed fuzz/corpus/<target>
#   scripts/fuzz.sh replay           build optimised, run every seed, corpus entry and regression once
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
ALL_TARGETS="packed_open wds_tar manifest image_transform crop list parquet plan_records options loader_state wds_input dataset"
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

# Runs write new inputs into fuzz/work/<target>/ (git-ignored) and read the committed seeds and
# minimised corpus beside it; `minimise` folds the work folder into fuzz/corpus/<target>/.
seed_corpus() {
  local t
  for t in $TARGETS; do
    mkdir -p "fuzz/work/$t" "fuzz/corpus/$t"
  done
}

# The folders a target reads: its work folder first (libFuzzer writes new inputs there), then the
# committed ones that exist.
corpus_dirs() {
  local t="$1" d
  echo "fuzz/work/$t"
  for d in "fuzz/corpus/$t" "fuzz/seeds/$t"; do
    if [ -d "$d" ] && [ -n "$(ls -A "$d")" ]; then echo "$d"; fi
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
  local seconds="$1" runs="${2:--1}" t failed=() dirs
  mkdir -p fuzz/logs
  for t in $TARGETS; do
    echo "==> fuzzing $t for ${seconds}s (log: fuzz/logs/$t.log)" >&2
    mapfile -t dirs < <(corpus_dirs "$t")
    local rc=0 extra=()
    # These targets start threads per input (verify's rayon pool, pack's listing threads) that
    # may still be exiting when LeakSanitizer looks: it reports their thread-exit records
    # (`__cxa_thread_atexit_impl`, 32 to 128 bytes) as leaks. No leak check for them.
    case "$t" in dataset | wds_input | parquet) extra=(-detect_leaks=0) ;; esac
    cargo fuzz run "${FLAGS[@]}" "$t" "${dirs[@]}" -- -max_total_time="$seconds" -runs="$runs" \
      -rss_limit_mb="$RSS_MB" -timeout=30 -print_final_stats=1 "${extra[@]}" \
      >"fuzz/logs/$t.log" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] || failed+=("$t")
    grep -E "DONE|stat::number_of_executed_units|SUMMARY" "fuzz/logs/$t.log" >&2 || true
  done
  if [ "${#failed[@]}" -gt 0 ]; then
    echo "==> crashes in: ${failed[*]}" >&2
    echo "    inputs are in fuzz/artifacts/<target>/; copy each to fuzz/regressions/<target>/," >&2
    echo "    reproduce with: RUSTC_BOOTSTRAP=1 cargo fuzz run ${FLAGS[*]} <target> <file>" >&2
    return 1
  fi
}

minimise() {
  local t dirs new
  for t in $TARGETS; do
    mapfile -t dirs < <(corpus_dirs "$t")
    new="fuzz/work/$t.min"
    rm -rf "$new" && mkdir -p "$new"
    echo "==> minimising ${dirs[*]} into fuzz/corpus/$t" >&2
    # -merge=1 keeps the smallest set of inputs with the same coverage, written into $new.
    cargo fuzz run "${FLAGS[@]}" "$t" "$new" "${dirs[@]}" -- -merge=1 -rss_limit_mb="$RSS_MB" \
      -timeout=30 2>&1 | grep -E "MERGE-OUTER: [0-9]+ new files" >&2
    # Seeds are committed already; keep only what they do not hold.
    local s
    for s in "fuzz/seeds/$t"/*; do
      [ -f "$s" ] && rm -f "$new/$(sha1sum "$s" | cut -d' ' -f1)"
    done
    rm -rf "fuzz/corpus/$t" && mv "$new" "fuzz/corpus/$t"
    echo "    fuzz/corpus/$t: $(ls "fuzz/corpus/$t" | wc -l) inputs, $(du -sh "fuzz/corpus/$t" | cut -f1)" >&2
  done
}

replay() {
  local t dirs failed=()
  for t in $TARGETS; do
    dirs=()
    for d in "fuzz/seeds/$t" "fuzz/corpus/$t" "fuzz/regressions/$t"; do
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
    run "$2" "${3:-}"
    ;;
  minimise)
    ensure_cargo_fuzz
    seed_corpus
    build "${FLAGS[@]}"
    minimise
    ;;
  replay)
    ensure_cargo_fuzz
    build "${FLAGS[@]}"
    replay
    ;;
  *) usage ;;
esac
