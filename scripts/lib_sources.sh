# shellcheck shell=bash
# Sourced by the format scripts: prints the repo's C++/CUDA sources, one per line.
# Tracked files plus untracked ones git does not ignore (so it also works before the
# first commit); without git, a find that skips build folders.
kiln_cxx_sources() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard -- \
      '*.h' '*.hpp' '*.cpp' '*.cc' '*.cu' '*.cuh' | sort -u | while read -r f; do
      [[ -f "$f" ]] && printf '%s\n' "$f"
    done
  else
    find . \( -path ./.git -o -path './build*' -o -path ./.gpu \) -prune -o -type f \
      \( -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.cc' -o -name '*.cu' \
      -o -name '*.cuh' \) -print | sed 's|^\./||' | sort
  fi
}
