#!/usr/bin/env bash
# Runs the differential fuzzer (tests/fuzz/README.md) for a longer budget than CI's:
# random op programs run eager, traced-interpreted and JIT-compiled (and on CUDA when a
# GPU is present) must agree. A mismatch is shrunk, printed (one-line reproducer + C++
# listing) and saved under tests/fuzz_cases/, which the regression test replays.
#
#   scripts/fuzz.sh              10 minutes, a fresh seed
#   scripts/fuzz.sh 3600         an hour
#   KILN_FUZZ_SEED=7 scripts/fuzz.sh 60     a given seed
#   KILN_FUZZ_DEVICE=cuda scripts/fuzz.sh   the CUDA legs too (skipped without a GPU)
#
# Builds only kiln_fuzz, in KILN_BUILD_DIR (default build). Exit status 1 on a mismatch.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${KILN_BUILD_DIR:-build}"
SECONDS_BUDGET="${1:-600}"
SEED="${KILN_FUZZ_SEED:-$(date +%s)}"
DEVICE="${KILN_FUZZ_DEVICE:-cuda}"

if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  echo "[fuzz] $BUILD_DIR is not configured: run scripts/setup.sh first" >&2
  exit 1
fi
cmake --build "$BUILD_DIR" -j "${KILN_JOBS:-$(nproc)}" --target kiln_fuzz
exec "$BUILD_DIR/tests/kiln_fuzz" --seed "$SEED" --seconds "$SECONDS_BUDGET" --device "$DEVICE" \
  --save-dir "$ROOT/tests/fuzz_cases"
