#!/usr/bin/env bash
# Runs the differential fuzzer (tests/fuzz/README.md) for a longer budget than CI's:
# random op programs run eager, traced-interpreted and JIT-compiled (and on CUDA when a
# GPU is present) must agree. A mismatch is shrunk, printed (one-line reproducer + C++
# listing) and saved under tests/fuzz_cases/, which the regression test replays.
#
#   scripts/fuzz.sh              10 minutes, a fresh seed
#   scripts/fuzz.sh 3600         an hour
#   KILN_FUZZ_SEED=7 scripts/fuzz.sh 60     a given seed
#   KILN_FUZZ_DEVICE=cpu scripts/fuzz.sh    CPU legs only (default: cuda, skipped without a GPU)
#
# The budget runs as a series of kiln_fuzz processes of at most KILN_FUZZ_CHUNK seconds
# (default 240) with seeds SEED, SEED+1, ...: a crash loses one chunk, not the budget.
# (Before the LLVM kernel table had its LRU limit, one process's compiled code was never
# unmapped and past ~25k programs vm.max_map_count ran out; now a process stays at
# ~1,600 mappings: 21,700 programs in one process, 1,636 -> 1,613.) Builds only
# kiln_fuzz, in KILN_BUILD_DIR (default build). Exit status 1 when any chunk found a
# mismatch or crashed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
BUILD_DIR="${KILN_BUILD_DIR:-build}"
BUDGET="${1:-600}"
SEED="${KILN_FUZZ_SEED:-$(date +%s)}"
DEVICE="${KILN_FUZZ_DEVICE:-cuda}"
CHUNK="${KILN_FUZZ_CHUNK:-240}"

if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  echo "[fuzz] $BUILD_DIR is not configured: run scripts/setup.sh first" >&2
  exit 1
fi
cmake --build "$BUILD_DIR" -j "${KILN_JOBS:-$(nproc)}" --target kiln_fuzz || exit 1

start=$(date +%s)
rc=0
programs=0
mismatches=0
while true; do
  left=$((BUDGET - ($(date +%s) - start)))
  ((left > 0)) || break
  seconds=$((left < CHUNK ? left : CHUNK))
  out="$(mktemp)"
  "$BUILD_DIR/tests/kiln_fuzz" --seed "$SEED" --seconds "$seconds" --device "$DEVICE" \
    --save-dir "$ROOT/tests/fuzz_cases" 2>&1 | tee "$out"
  ((PIPESTATUS[0] == 0)) || rc=1
  if summary="$(grep '\[kiln_fuzz\] done:' "$out")"; then
    programs=$((programs + $(sed -E 's/.*done: ([0-9]+) programs.*/\1/' <<<"$summary")))
    mismatches=$((mismatches + $(sed -E 's/.*, ([0-9]+) mismatches.*/\1/' <<<"$summary")))
  fi
  rm -f "$out"
  SEED=$((SEED + 1))
done
echo "[fuzz] $BUDGET s budget: $programs programs, $mismatches mismatches (exit $rc)"
exit "$rc"
