#!/usr/bin/env bash
# Formats every C++/CUDA source in the repo in place with the root .clang-format.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/lib_sources.sh
mapfile -t files < <(kiln_cxx_sources)
((${#files[@]})) || { echo "[format] no C++ sources"; exit 0; }
printf '%s\0' "${files[@]}" | xargs -0 -n 50 clang-format -i
echo "[format] formatted ${#files[@]} files"
