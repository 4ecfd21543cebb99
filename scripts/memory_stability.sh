#!/usr/bin/env bash
# Memory stability of a traced training loop (issue 9): 100,000 iterations on the CPU
# (and 10,000 on CUDA when a GPU is present; skipped cleanly without) of a small MLP
# trained with Adam (forward, cross_entropy, backward, step, loss.item()), in three
# variants (one batch size; two batch sizes alternating; a graph break mid-step), then
# 5,000 distinct shapes through the tracer. Prints a table of resident memory (VmRSS),
# heap in use and device memory sampled after warmup, and exits 1 when any grows by more
# than max(8 MiB, 2%) after the warmup or a cache outgrows its limit.
#
#   scripts/memory_stability.sh                       the full budget
#   scripts/memory_stability.sh --iterations 20000    any kiln_memory_stability option
#   KILN_BUILD_DIR=build-stab scripts/memory_stability.sh
#   KILN_MEMORY_LOG=out.txt scripts/memory_stability.sh   also keep the output there
#
# The binary is tests/stability/memory_stability.cpp (built as kiln_memory_stability);
# ctest runs a quick budget of it (kiln_memory_stability_quick).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${KILN_BUILD_DIR:-build}"
BIN="$BUILD_DIR/tests/kiln_memory_stability"

if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  echo "[memory] no build in $BUILD_DIR: run scripts/setup.sh first (or set KILN_BUILD_DIR)" >&2
  exit 2
fi
echo "[memory] building kiln_memory_stability in $BUILD_DIR" >&2
cmake --build "$BUILD_DIR" --target kiln_memory_stability -j "${KILN_JOBS:-$(nproc)}" >&2

args=(--iterations 100000 --cuda-iterations 10000 --samples 20 --shapes 5000)
args+=("$@")
echo "[memory] $BIN ${args[*]}" >&2
start=$(date +%s)
status=0
if [[ -n "${KILN_MEMORY_LOG:-}" ]]; then
  "$BIN" "${args[@]}" | tee "$KILN_MEMORY_LOG" || status=$?
else
  "$BIN" "${args[@]}" || status=$?
fi
echo "[memory] done in $(($(date +%s) - start)) s, exit $status" >&2
exit "$status"
