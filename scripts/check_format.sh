#!/usr/bin/env bash
# Fails (and lists the files) if clang-format would change any C++/CUDA source.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/lib_sources.sh
mapfile -t files < <(kiln_cxx_sources)
if ((${#files[@]} == 0)); then
  echo "[format] no C++ sources found"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "[format] ${#bad[@]} of ${#files[@]} files are not clang-formatted (run scripts/format.sh):"
  printf '  %s\n' "${bad[@]}"
  # Show the first offending file's complaints to make the failure concrete.
  clang-format --dry-run -Werror "${bad[0]}" 2>&1 | head -n 20 || true
  exit 1
fi
echo "[format] ${#files[@]} files clang-formatted"
