#!/usr/bin/env bash
# Builds bench/bench_cpu_gemm.cpp once per CPU GEMM library found on this machine and runs
# each on 1 and 2 threads; prints one table per library and thread count.
#
#   bash bench/bench_cpu_gemm.sh [filter]        (filter: a substring of the shape names)
#   env: BENCH_GEMM_ROUNDS, BENCH_GEMM_THREADS ('1 2'), BENCH_GEMM_LIBS, BENCH_GEMM_LOOP_S;
#   bench/bench_cpu_gemm_table.py turns the output into a table (best over rounds).
#
# Debian libraries used when installed: libopenblas-{pthread,openmp,serial}-dev,
# libblis-{pthread,openmp}-dev, libdnnl-dev. PyPI builds (oneDNN 3.x, MKL) when
# PYPI_BLAS_DIR names a folder holding their unpacked wheels (python3 -m pip download
# --no-deps onednn-cpu-gomp mkl mkl-include intel-openmp, then unzip each into it); the
# wheels carry no oneDNN headers, so only dnnl_sgemm is timed for them.
set -euo pipefail
cd "$(dirname "$0")/.."
filter="${1:-}"
out="${BENCH_GEMM_BUILD:-build/bench_cpu_gemm}"
mkdir -p "$out"
src=bench/bench_cpu_gemm.cpp
cxx="${CXX:-g++}"
flags=(-O2 -std=c++20 -Wall)
lib=/usr/lib/x86_64-linux-gnu
inc=/usr/include/x86_64-linux-gnu
built=()

build() {  # name, then compiler arguments
  local name="$1"
  shift
  "$cxx" "${flags[@]}" "$src" -o "$out/$name" "$@"
  built+=("$name")
}

for v in pthread openmp serial; do
  [ -e "$lib/openblas-$v/libopenblas.so" ] &&
    build "openblas-$v" -DBENCH_CBLAS -I"$inc/openblas-$v" -L"$lib/openblas-$v" \
      -Wl,-rpath,"$lib/openblas-$v" -lopenblas
done
for v in pthread openmp; do
  [ -e "$lib/blis-$v/libblis.so" ] &&
    build "blis-$v" -DBENCH_CBLAS -I"$inc/blis-$v" -L"$lib/blis-$v" -Wl,-rpath,"$lib/blis-$v" -lblis
done
if [ -e /usr/include/dnnl.hpp ]; then
  build dnnl2-sgemm -DBENCH_DNNL_SGEMM -ldnnl
  build dnnl2-matmul -DBENCH_DNNL_MATMUL -ldnnl
fi
if [ -n "${PYPI_BLAS_DIR:-}" ]; then
  dnnl3=$(dirname "$(find "$PYPI_BLAS_DIR" -path '*onednn_cpu_gomp*' -name libdnnl.so.3 | head -1)")
  [ -d "$dnnl3" ] && build dnnl3-gomp-sgemm -DBENCH_DNNL_SGEMM "$dnnl3/libdnnl.so.3" \
    -Wl,-rpath,"$dnnl3"
  mkl=$(dirname "$(find "$PYPI_BLAS_DIR" -name libmkl_rt.so.3 | head -1)")
  mkl_inc=$(dirname "$(find "$PYPI_BLAS_DIR" -name mkl_cblas.h | head -1)")
  iomp=$(dirname "$(find "$PYPI_BLAS_DIR" -name libiomp5.so | head -1)")
  [ -d "$mkl" ] && build mkl -DBENCH_CBLAS -DBENCH_MKL -I"$mkl_inc" "$mkl/libmkl_rt.so.3" \
    -Wl,-rpath,"$mkl:$iomp"
fi

# Rounds interleave the libraries (the machine is shared: noise falls on all alike);
# BENCH_GEMM_LIBS (space-separated) and BENCH_GEMM_THREADS pick what runs.
libs=(${BENCH_GEMM_LIBS:-${built[@]}})
for round in $(seq "${BENCH_GEMM_ROUNDS:-1}"); do
  for threads in ${BENCH_GEMM_THREADS:-1 2}; do
    for name in "${libs[@]}"; do
      echo "== $name, $threads thread(s), round $round"
      OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads BLIS_NUM_THREADS=$threads \
        MKL_NUM_THREADS=$threads "$out/$name" "$filter"
    done
  done
done
