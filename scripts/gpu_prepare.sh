#!/usr/bin/env bash
# Run HERE (the build machine, no GPU) before scripts/gpu_run.sh runs on the lent GPU
# machine. Builds kiln with CUDA for sm_90 in build-gpu/ (if needed) and assembles the
# folder .gpu/ (ignored by git) that the device tool carries:
#
#   .gpu/lib/      libkiln.so (stripped)
#   .gpu/bin/      kiln_tests, kiln_demo, bench_eager_overhead, bench_cpu_bandwidth,
#                  kiln_memory_stability, kiln_fuzz
#   .gpu/python/   the built Python package (build-gpu/python, symlinks resolved)
#   .gpu/debs/     Debian .deb files for what the GPU machine (Ubuntu 24.04, Python
#                  3.12, no apt access) lacks: Python 3.11 for the Boost.Python module,
#                  numpy and pytest for it, OpenBLAS, Boost.Python, Google Benchmark.
#                  gpu_run.sh unpacks them with dpkg -x under /tmp (never into /).
#
# The GPU machine's own CUDA 13 libraries (cuBLAS, cuBLASLt) are used there; cudart is
# linked statically. Then, through the device tool (see scripts/gpu_run.sh's header):
#   run(command="bash scripts/gpu_run.sh", carry=[".gpu"], timeout_s=600)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${KILN_GPU_BUILD_DIR:-build-gpu}"
CARRY=.gpu
LIMIT_MIB=60

DEBS=(
  libopenblas0-pthread libgfortran5 libquadmath0
  libboost-python1.74.0 libbenchmark1debian
  python3.11-minimal libpython3.11-minimal libpython3.11-stdlib
  python3-numpy
  python3-pytest python3-pluggy python3-iniconfig python3-packaging python3-py
  python3-attr python3-more-itertools python3-pkg-resources
)

log() { printf '[gpu_prepare] %s\n' "$*" >&2; }

# ---- 1. build (setup.sh installs missing packages, configures once, builds incrementally)
[[ -x /usr/local/cuda/bin/nvcc ]] || { log "no CUDA toolkit at /usr/local/cuda"; exit 1; }
KILN_BUILD_DIR="$BUILD" \
  KILN_CMAKE_ARGS="-DKILN_WITH_CUDA=ON -DKILN_CUDA_ARCHS=90 -DKILN_WITH_LLVM=OFF ${KILN_CMAKE_ARGS:-}" \
  bash scripts/setup.sh

find_built() {  # find_built NAME: the built file NAME under $BUILD (first match)
  find "$BUILD" -name "$1" \( -type f -o -type l \) -not -path '*/CMakeFiles/*' -print -quit
}
lib="$(find_built libkiln.so)"
[[ -n "$lib" ]] || { log "libkiln.so not found under $BUILD"; exit 1; }
# ldd's output is captured first: `ldd | grep -q` under pipefail fails now and then, when
# grep -q exits at the first match and ldd dies of SIGPIPE writing the rest.
linked="$(ldd "$lib")" || { log "ldd $lib failed"; exit 1; }
if [[ "$linked" != *libcublas* ]]; then
  log "$lib does not link cuBLAS: the CUDA backend was not built (see configure output)"
  exit 1
fi

# ---- 2. assemble the carry folder
rm -rf "$CARRY"
mkdir -p "$CARRY"/{lib,bin,debs}
cp -L "$lib" "$CARRY/lib/libkiln.so"
# Keep the SONAME'd name too if the library has one (the binaries ask for it).
soname="$(objdump -p "$lib" | awk '/SONAME/ {print $2}')"
if [[ -n "$soname" && "$soname" != libkiln.so ]]; then
  cp -L "$lib" "$CARRY/lib/$soname"
fi

for b in kiln_tests kiln_demo bench_eager_overhead bench_cpu_bandwidth kiln_memory_stability kiln_fuzz; do
  f="$(find_built "$b")"
  if [[ -n "$f" ]]; then
    cp -L "$f" "$CARRY/bin/$b"
  else
    log "warning: $b not built; it will be missing on the GPU machine"
  fi
done

if [[ -d "$BUILD/python" ]]; then
  cp -rL "$BUILD/python" "$CARRY/python"
  find "$CARRY/python" \( -name __pycache__ -o -name '*.pyc' \) -prune -exec rm -rf {} +
else
  log "warning: $BUILD/python missing (Python module not built); no pytest run there"
fi

# Strip everything ELF (symbols are not needed there; the CUDA fatbin stays).
while IFS= read -r -d '' f; do
  if [[ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" == '177ELF' ]]; then
    strip --strip-unneeded "$f"
  fi
done < <(find "$CARRY/lib" "$CARRY/bin" "$CARRY/python" -type f -print0 2>/dev/null)

# ---- 3. the .deb files (cached in .debs/, also ignored by git)
mkdir -p .debs
(
  cd .debs
  need=()
  for p in "${DEBS[@]}"; do
    compgen -G "${p}_*.deb" >/dev/null || need+=("$p")
  done
  if ((${#need[@]})); then
    log "apt-get download ${need[*]}"
    apt-get download "${need[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true
  fi
)
for p in "${DEBS[@]}"; do
  f="$(compgen -G ".debs/${p}_*.deb" | sort | tail -n 1 || true)"
  [[ -n "$f" ]] || { log "could not download $p"; exit 1; }
  cp "$f" "$CARRY/debs/$p.deb"  # plain names: no '%3a' epoch escapes in transit
done

# ---- 4. report
echo "[gpu_prepare] $CARRY contents:"
(cd "$CARRY" && du -sh lib bin python debs 2>/dev/null | sed 's/^/  /')
kib="$(du -sk "$CARRY" | cut -f1)"
mib=$(((kib + 1023) / 1024))
tree_kib="$(git ls-files --cached --others --exclude-standard -z | du -ck --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)"
echo "[gpu_prepare] $CARRY: ${mib} MiB (limit ${LIMIT_MIB}); working tree without it: $(((tree_kib + 1023) / 1024)) MiB; device tool limit 64 MiB in all"
if ((mib > LIMIT_MIB)); then
  log "$CARRY is over ${LIMIT_MIB} MiB"
  exit 1
fi
echo '[gpu_prepare] next, through the device tool: run(command="bash scripts/gpu_run.sh", carry=[".gpu"], timeout_s=600)'
