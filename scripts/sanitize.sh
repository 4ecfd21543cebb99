#!/usr/bin/env bash
# ASan + UBSan + LeakSanitizer runs of kiln's test suites (issue 9). Configures and
# builds a separate tree (build-asan: -DKILN_SANITIZE=address,undefined, -O2 -g1 (CI: -O1), LLVM
# JIT on, CUDA on when the toolkit is there; the CUDA tests skip without a GPU), then
# runs, each under ASan + UBSan (any UB report is fatal) with leak detection on:
#
#   1. kiln_tests            every GoogleTest suite, one process (leaks checked at exit)
#   2. kiln_fuzz             the differential fuzzer, a small fixed-seed budget
#   3. kiln_memory_stability a short run (exercises the trace/kernel LRU eviction paths;
#                            its memory bounds are loose: ASan's quarantine and shadow
#                            memory make RSS figures meaningless here)
#   4. pytest                tests/python under /usr/bin/python3 with the ASan runtime
#                            preloaded and PYTHONMALLOC=malloc (tracer on, then KILN_TRACE=0)
#
# and prints one summary line per step. Exit status 0 only if every step was clean.
#
#   scripts/sanitize.sh              build + all steps
#   scripts/sanitize.sh build        configure + build only
#   scripts/sanitize.sh cpp          build + steps 1-3
#   scripts/sanitize.sh python       build + step 4
#   scripts/sanitize.sh ci           CI's subset (scripts/test.sh with KILN_SANITIZE_CI=1):
#                                    build-asan-ci without CUDA and Python (build time),
#                                    steps 1 and 2 with CI's filter and fuzz budget
#
# Knobs: KILN_ASAN_BUILD_DIR (default build-asan), KILN_JOBS (default 2),
# KILN_SANITIZE_GTEST_FILTER (default '*'), KILN_SANITIZE_FUZZ_PROGRAMS (default 400) and
# KILN_SANITIZE_FUZZ_SECONDS (default 150), KILN_SANITIZE_PYTEST_ARGS (extra pytest
# arguments, e.g. "-k matmul"), KILN_SANITIZE_PY_EAGER=0 (skip the KILN_TRACE=0 pytest
# pass). Logs: $KILN_ASAN_BUILD_DIR/sanitize-logs/ (one file per step; a sanitizer
# report is the block starting with "==<pid>==ERROR" or "runtime error:").
#
# Suppressions (scripts/sanitize/): lsan.supp for leaks inside third-party libraries
# (each entry says why), lsan_python.supp adds CPython's own; ubsan.supp is empty on
# purpose (kiln's UB is fixed, not suppressed).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
BUILD_DIR="${KILN_ASAN_BUILD_DIR:-build-asan}"
[[ "${1:-}" == ci ]] && BUILD_DIR="${KILN_ASAN_BUILD_DIR:-build-asan-ci}"
JOBS="${KILN_JOBS:-2}"
MODE="${1:-all}"
LOG_DIR="$BUILD_DIR/sanitize-logs"
SUPP="$ROOT/scripts/sanitize"

log() { printf '[sanitize] %s\n' "$*" >&2; }
case "$MODE" in
  all | build | cpp | python | ci) ;;
  *)
    log "usage: scripts/sanitize.sh [all|build|cpp|python|ci]"
    exit 2
    ;;
esac

# ---- 1. configure + build (the packages come from scripts/setup.sh's list)
t0=$(date +%s)
# shellcheck disable=SC2054  # the commas belong to -DKILN_SANITIZE=address,undefined
cmake_args=(-S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
  -DKILN_SANITIZE=address,undefined -DKILN_WITH_LLVM=ON -DKILN_BUILD_BENCH=OFF)
[[ -f "$BUILD_DIR/CMakeCache.txt" ]] || cmake_args+=(-G Ninja)
# CI's subset builds at -O1 (ASan's documented minimum for usable speed): on CI's
# 2 cores -O2 -g1 took 782 s of a 1950 s run
[[ "$MODE" == ci ]] && cmake_args+=(-DKILN_WITH_CUDA=OFF -DKILN_BUILD_PYTHON=OFF
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
# shellcheck disable=SC2206  # word splitting of the extra flags is intended
cmake_args+=(${KILN_CMAKE_ARGS:-})
nice -n 10 cmake "${cmake_args[@]}" >/dev/null || {
  log "configure FAILED"
  exit 1
}
targets=(kiln_tests kiln_fuzz)
[[ "$MODE" == ci ]] || targets+=(kiln_memory_stability)
if [[ "$MODE" == python || "$MODE" == all ]]; then
  targets+=(_kiln kiln_python_package)
fi
nice -n 10 cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}" || {
  log "build FAILED"
  exit 1
}
log "configure + build: $(($(date +%s) - t0)) s"
[[ "$MODE" == build ]] && exit 0

# ---- 2. the sanitizer environment
mkdir -p "$LOG_DIR"
ASAN_RT="$(ldd "$BUILD_DIR/libkiln.so" | awk '/libasan\.so/ {print $3; exit}')"
# Preloaded with the ASan runtime for Python: ASan looks up the real __cxa_throw when it
# starts, and python3 does not link libstdc++ (else: CHECK failed ... real___cxa_throw
# at kiln's first C++ exception).
CXX_RT="$(ldd "$BUILD_DIR/libkiln.so" | awk '/libstdc\+\+\.so/ {print $3; exit}')"
if [[ -z "$ASAN_RT" || ! -f "$ASAN_RT" ]]; then
  log "$BUILD_DIR/libkiln.so is not linked against the ASan runtime: is it a sanitizer build?"
  exit 1
fi
# detect_leaks=1: LeakSanitizer at exit. protect_shadow_gap=0: the CUDA driver maps
# memory in ASan's shadow gap (only matters with a GPU). detect_odr_violation=0: the
# Boost.Python module and libkiln both carry Boost's header-only statics.
# check_initialization_order / strict_init_order: static-init-order fiasco checks.
# allocator_may_return_null=1: an allocation that fails returns null as glibc's does
# (the fault tests cap the address space and check kiln's OutOfMemoryError).
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:halt_on_error=1:abort_on_error=0:exitcode=66:protect_shadow_gap=0:detect_odr_violation=0:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:print_summary=1${KILN_ASAN_OPTIONS:+:$KILN_ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=67:suppressions=$SUPP/ubsan.supp"
export LSAN_OPTIONS="suppressions=$SUPP/lsan.supp:print_suppressions=0:exitcode=68"
# No disk cache shared with the normal build: every compile runs under the sanitizers.
KILN_CACHE_DIR="$(mktemp -d /tmp/kiln-asan-cache.XXXXXX)"
export KILN_CACHE_DIR
trap 'rm -rf "$KILN_CACHE_DIR"' EXIT

declare -a ROWS=()
FAILED=0
# run_step NAME LOG CMD...: runs CMD, records status, time and the first sanitizer
# report's headline for the summary.
run_step() {
  local name="$1" logf="$LOG_DIR/$2"
  shift 2
  log "$name: $* (log: $logf)"
  local t rc attempt retried=""
  t=$(date +%s)
  for attempt in 1 2; do
    # The reports go to files of their own (one per process: pytest's capture would swallow
    # those of a crash, and child processes have their own), appended to the step's log.
    rm -f "$logf".asan.* "$logf".ubsan.*
    ASAN_OPTIONS="$ASAN_OPTIONS${STEP_ASAN:+:$STEP_ASAN}:log_path=$logf.asan" UBSAN_OPTIONS="$UBSAN_OPTIONS:log_path=$logf.ubsan" \
      "$@" >"$logf" 2>&1
    rc=$?
    local f
    for f in "$logf".asan.* "$logf".ubsan.*; do
      [[ -f "$f" ]] || continue
      printf '\n---- sanitizer report %s\n' "$f" >>"$logf"
      cat "$f" >>"$logf"
      rm -f "$f"
    done
    # LeakSanitizer failing itself at exit ("has encountered a fatal error": its tracer
    # could not stop the process's threads, so no leak check ran; CI saw it once in a
    # run whose tests all passed) is not a finding: the step runs once more, and counts
    # only if that run is clean. A leak or any other report is never retried.
    if ((attempt > 1)) || ! lsan_could_not_run "$logf" "$rc"; then break; fi
    retried=" (LSan fatal error on the first run: ran again)"
    cp "$logf" "$logf.first"
    log "$name: LeakSanitizer could not run its check (tail in $logf.first); running again"
  done
  local dt=$(($(date +%s) - t))
  local nerr
  nerr=$(grep -cE '^==[0-9]+==ERROR|runtime error:' "$logf")
  local status=clean
  if [[ -n "${LEAKS_OF_OTHERS_OK:-}" ]] && third_party_leaks_only "$logf" "$rc"; then
    status="clean*"  # the only reports are leaks without a kiln frame (see below)
    nerr=0
  elif ((rc != 0 || nerr != 0)); then
    status="FAIL(exit $rc)"
    FAILED=$((FAILED + 1))
  fi
  local first
  first="$(grep -m1 -E '^==[0-9]+==ERROR|runtime error:|^SUMMARY: (Address|Leak|Undefined)' "$logf" |
    cut -c1-150)"
  ROWS+=("$(printf '%-26s %-14s %5ss  sanitizer reports: %s%s' "$name" "$status" "$dt" "$nerr" "$retried")")
  [[ -n "$first" ]] && ROWS+=("    first: $first")
  tail -n 3 "$logf" | sed 's/^/    | /' >&2
}

# Whether a run failed only because LeakSanitizer could not do its check (exit 1, or
# LSan's exit code 68, with its "fatal error" line and no sanitizer report of any kind).
lsan_could_not_run() {
  local logf="$1" rc="$2"
  ((rc == 1 || rc == 68)) || return 1
  grep -q 'LeakSanitizer has encountered a fatal error' "$logf" || return 1
  ! grep -qE '^==[0-9]+==ERROR|runtime error:|^\[  FAILED  \]' "$logf"
}

# The Python runs: CPython never frees everything at exit, and torch (1.13, imported by
# the tests as the oracle), PIL and numpy leave module-init allocations that LSan reports
# from the main pytest process. Such a run counts as clean ("clean*") when pytest passed,
# every sanitizer report is a leak report, and no leaked block, direct or indirect, was
# allocated with a kiln frame on its stack (kiln's tensors, storages, autograd nodes,
# traces, its Python module); the others are listed by library. The subprocess tests run
# with the same LSan settings and must exit 0, so their leaks fail the test that ran them.
third_party_leaks_only() {
  local logf="$1" rc="$2"
  ((rc == 0 || rc == 68)) || return 1
  local verdict  # pytest's last line: "N passed, M skipped in Ts"
  verdict="$(grep -E '(passed|failed|error).* in [0-9.]+s' "$logf" | tail -n 1)"
  [[ "$verdict" == *passed* && "$verdict" != *failed* && "$verdict" != *error* ]] || return 1
  python3 - "$logf" <<'PYEOF'
import collections, re, sys
text = open(sys.argv[1], errors="replace").read()
if re.search(r"ERROR: AddressSanitizer|runtime error:", text):
    sys.exit(1)
kiln = re.compile(r"kiln::|libkiln\.so|/_kiln\.|python_bindings/src/")
others = collections.Counter()
bad = 0
for block in re.split(r"\n(?=(?:Direct|Indirect) leak of )", text)[1:]:
    block = block.split("\n\n")[0]
    if kiln.search(block):
        bad += 1
        print("kiln leak:", block.splitlines()[0], file=sys.stderr)
        continue
    libs = re.findall(r"\((/[^)+]+)\+0x", block) or ["?"]
    named = [l.rsplit("/", 1)[-1] for l in libs if "python3" not in l and "libasan" not in l]
    others[named[0] if named else "python3.11 (CPython itself)"] += 1
for lib, n in others.most_common():
    print(f"    leaks without a kiln frame: {n:3d} from {lib}", file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF
}

cpp_steps() {
  local bin="$BUILD_DIR/tests"
  run_step "kiln_tests" kiln_tests.log \
    "$bin/kiln_tests" --gtest_brief=1 --gtest_filter="${KILN_SANITIZE_GTEST_FILTER:-$GTEST_FILTER}"
  run_step "kiln_fuzz" kiln_fuzz.log \
    "$bin/kiln_fuzz" --seed 9 --programs "${KILN_SANITIZE_FUZZ_PROGRAMS:-$FUZZ_PROGRAMS}" \
    --seconds "${KILN_SANITIZE_FUZZ_SECONDS:-$FUZZ_SECONDS}" --save-dir "$BUILD_DIR/fuzz_failures"
  [[ "$MODE" == ci ]] && return
  # A small quarantine so that freed blocks come back and the heap levels off.
  STEP_ASAN=quarantine_size_mb=16 run_step "kiln_memory_stability" memory_stability.log \
    env KILN_MAX_TRACES=64 \
    KILN_TRACE_CACHE_OPS=2048 KILN_KERNEL_CACHE_ENTRIES=16 \
    "$bin/kiln_memory_stability" --iterations 600 --samples 4 --shapes 300 \
    --warmup-fraction 0.5 --bound-mib 256 --device cpu
}

python_steps() {
  # The interpreter is not instrumented: the ASan runtime must be loaded first
  # (LD_PRELOAD, with libstdc++: see CXX_RT); PYTHONMALLOC=malloc sends Python's objects through ASan's allocator.
  # LSan reads one suppressions file: the third-party list plus CPython's.
  cat "$SUPP/lsan.supp" "$SUPP/lsan_python.supp" >"$LOG_DIR/lsan_python_all.supp"
  # fast_unwind_on_malloc=0: python3.11 has no frame pointers, so ASan's fast unwinder
  # stops in the interpreter; the slow one gives whole stacks that the suppressions in
  # lsan_python.supp can name (numpy's / torch's module-init allocations).
  local STEP_ASAN=fast_unwind_on_malloc=0:malloc_context_size=40
  local py_env=(env LD_PRELOAD="$ASAN_RT $CXX_RT" PYTHONMALLOC=malloc
    LSAN_OPTIONS="${LSAN_OPTIONS/$SUPP\/lsan.supp/$LOG_DIR/lsan_python_all.supp}"
    PYTHONPATH="$ROOT/$BUILD_DIR/python" PYTHONDONTWRITEBYTECODE=1)
  local LEAKS_OF_OTHERS_OK=1
  # shellcheck disable=SC2086  # KILN_SANITIZE_PYTEST_ARGS: extra pytest arguments
  run_step "pytest" pytest.log "${py_env[@]}" /usr/bin/python3 -m pytest -q \
    -p no:cacheprovider ${KILN_SANITIZE_PYTEST_ARGS:-} tests/python
  if [[ "${KILN_SANITIZE_PY_EAGER:-1}" != 0 ]]; then
    # shellcheck disable=SC2086
    run_step "pytest (KILN_TRACE=0)" pytest_eager.log "${py_env[@]}" KILN_TRACE=0 \
      /usr/bin/python3 -m pytest -q -p no:cacheprovider \
      --ignore=tests/python/test_tracer.py --ignore=tests/python/test_tracer_footguns.py \
      ${KILN_SANITIZE_PYTEST_ARGS:-} tests/python
  fi
}

GTEST_FILTER='*'
FUZZ_PROGRAMS=400
FUZZ_SECONDS=150
if [[ "$MODE" == ci ]]; then
  GTEST_FILTER='*'
  FUZZ_PROGRAMS=1000  # about 90 s on 2 cores under ASan
  FUZZ_SECONDS=120
fi
[[ "$MODE" == all || "$MODE" == cpp || "$MODE" == ci ]] && cpp_steps
[[ "$MODE" == all || "$MODE" == python ]] && python_steps

echo
echo "==================== kiln sanitizer run (ASan + UBSan + LSan) ===================="
printf '%s\n' "${ROWS[@]}"
echo "total: $(($(date +%s) - t0)) s; logs in $LOG_DIR"
((FAILED == 0))
