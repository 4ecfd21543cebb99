#!/usr/bin/env bash
# The README's test command (and CI's): installs what is missing, builds, runs every
# test registered with CTest (the C++ GoogleTest suites and the pytest suite), then
# checks that clang-format leaves the tree unchanged. Exit status 0 only if all pass.
#
#   KILN_CTEST_ARGS="-R Tensor"   extra ctest arguments (a filter, say)
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

if ((ctest_rc != 0 || format_rc != 0)); then
  echo "[test] FAILED (ctest exit $ctest_rc, format check exit $format_rc)"
  exit 1
fi
echo "[test] all passed"
