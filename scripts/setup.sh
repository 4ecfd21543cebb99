#!/usr/bin/env bash
# Installs what kiln needs (only the apt packages that are missing), then configures
# and builds kiln. Safe to run again and again: a second run installs nothing and
# rebuilds only what changed.
#
#   scripts/setup.sh                 build into ./build
#   KILN_BUILD_DIR=out scripts/setup.sh
#   KILN_CMAKE_ARGS="-DKILN_WITH_CUDA=OFF" scripts/setup.sh   extra configure flags
#   KILN_JOBS=1 scripts/setup.sh     fewer parallel compile jobs (default: all cores)
#
# Works as root (CI) and as a user with sudo.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${KILN_BUILD_DIR:-build}"
JOBS="${KILN_JOBS:-$(nproc)}"

PACKAGES=(
  cmake ninja-build g++
  python3-dev python3-numpy python3-pytest python3-torch
  llvm-19-dev clang-19 libzstd-dev
  libxsimd-dev xtl-dev
  libboost-python-dev libdlpack-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libdnnl2
  libopenmpi-dev openmpi-bin
  clang-format
)

log() { printf '[setup] %s\n' "$*" >&2; }

# ---- 1. apt packages (only the missing ones)
missing=()
for p in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)"
  [[ "$status" == "installed" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ "$(id -u)" -eq 0 ]]; then
    SUDO=()
  elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    log "missing packages (${missing[*]}) and not root, no sudo: install them and rerun"
    exit 1
  fi
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -q
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  log "all ${#PACKAGES[@]} apt packages present"
fi

# ---- 2. configure (first time: Ninja; later: keep whatever generator the dir has)
cmake_args=(-S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release)
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake_args+=(-G Ninja)
fi
# ccache, when installed, makes rebuilds and fresh worktrees cheap (not required).
if command -v ccache >/dev/null 2>&1; then
  for lang in C CXX CUDA; do cmake_args+=("-DCMAKE_${lang}_COMPILER_LAUNCHER=ccache"); done
fi
# shellcheck disable=SC2206  # word splitting of the extra flags is intended
cmake_args+=(${KILN_CMAKE_ARGS:-})
log "configuring $BUILD_DIR"
cmake "${cmake_args[@]}"

# ---- 3. build
log "building with $JOBS jobs"
start=$(date +%s)
cmake --build "$BUILD_DIR" -j "$JOBS"
log "build done in $(($(date +%s) - start)) s"
