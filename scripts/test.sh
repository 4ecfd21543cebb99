#!/usr/bin/env bash
# The README's test command (and CI's): installs what is missing, builds, runs every
# test registered with CTest (the C++ GoogleTest suites and the pytest suite), then
# checks that clang-format leaves the tree unchanged. Exit status 0 only if all pass.
#
#   KILN_CTEST_ARGS="-R Tensor"   extra ctest arguments (a filter, say)
#   KILN_SANITIZE_CI=1            then CI's ASan + UBSan + LSan subset too (.ci/run sets
#                                 it): scripts/sanitize.sh ci builds build-asan-ci (no CUDA,
#                                 no Python module) and runs kiln_tests + a short fuzz
#                                 budget; the whole suite: scripts/sanitize.sh
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
BUILD_DIR="${KILN_BUILD_DIR:-build}"

bash scripts/setup.sh || { echo "[test] setup/build FAILED"; exit 1; }

start=$(date +%s)
# shellcheck disable=SC2086  # word splitting of the extra flags is intended
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" ${KILN_CTEST_ARGS:-}
ctest_rc=$?
echo "[test] ctest finished in $(($(date +%s) - start)) s (exit $ctest_rc)"

bash scripts/check_format.sh
format_rc=$?

sanitize_rc=0
if [[ "${KILN_SANITIZE_CI:-0}" == 1 ]]; then
  start=$(date +%s)
  bash scripts/sanitize.sh ci
  sanitize_rc=$?
  echo "[test] sanitizer subset finished in $(($(date +%s) - start)) s (exit $sanitize_rc)"
fi

if ((ctest_rc != 0 || format_rc != 0 || sanitize_rc != 0)); then
  echo "[test] FAILED (ctest exit $ctest_rc, format check exit $format_rc, sanitizers exit $sanitize_rc)"
  exit 1
fi
echo "[test] all passed"
