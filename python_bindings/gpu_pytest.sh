#!/usr/bin/env bash
# The Python suite and the Python overhead benchmark on the lent GPU machine, for the
# Python API alone (scripts/gpu_run.sh runs everything; this is the quick loop).
#
# Here:   python_bindings/gpu_pytest.sh prepare [build-dir]   (default build-py-cuda)
#         fills <build-dir>/gpu-carry/{lib,python} from a CUDA build of _kiln
# There:  run(command="bash python_bindings/gpu_pytest.sh run build-py-cuda/gpu-carry",
#             carry=["build-py-cuda/gpu-carry", ".gpu/debs"], timeout_s=600)
#         unpacks the Debian Python 3.11 (.gpu/debs, from scripts/gpu_prepare.sh) under
#         /tmp/kilndeb, runs pytest (tracer on, then KILN_TRACE=0) and
#         bench/py_overhead.py (kiln under 3.11, PyTorch under the machine's python3).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ "${1:-}" == "prepare" ]]; then
  BUILD="${2:-build-py-cuda}"
  C="$BUILD/gpu-carry"
  rm -rf "$C" && mkdir -p "$C/lib"
  cp -L "$BUILD/libkiln.so" "$C/lib/" && strip --strip-unneeded "$C/lib/libkiln.so"
  cp -rL "$BUILD/python" "$C/python"
  find "$C/python" \( -name __pycache__ -o -name '*.pyc' \) -prune -exec rm -rf {} +
  strip --strip-unneeded "$C"/python/kiln/_kiln*.so
  du -sh "$C"
  exit 0
fi

[[ "${1:-}" == "run" ]] || { echo "usage: $0 prepare [build] | run <carry>"; exit 2; }
G="$(cd "${2:?carry folder}" && pwd)"
OUT="${OUT:-/tmp/kiln-py-out}"
mkdir -p "$OUT"
DEB_ROOT=/tmp/kilndeb
rm -rf "$DEB_ROOT" && mkdir -p "$DEB_ROOT"
for f in .gpu/debs/*.deb; do dpkg -x "$f" "$DEB_ROOT"; done
CUBLAS_DIR=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -e "$d/libcublas.so.13" ]] && { CUBLAS_DIR="$d"; break; }
done
if [[ -z "$CUBLAS_DIR" ]]; then
  f="$(find /usr/local /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -n 1)"
  [[ -n "$f" ]] && CUBLAS_DIR="$(dirname "$f")"
fi
echo "cuBLAS: ${CUBLAS_DIR:-not found}; $(nvidia-smi -L 2>&1 | head -n 1)"
py311() {
  env LD_LIBRARY_PATH="$G/lib:$DEB_ROOT/usr/lib/x86_64-linux-gnu/openblas-pthread:$DEB_ROOT/usr/lib/x86_64-linux-gnu${CUBLAS_DIR:+:$CUBLAS_DIR}" \
    PYTHONHOME="$DEB_ROOT/usr" PYTHONPATH="$G/python:$DEB_ROOT/usr/lib/python3/dist-packages" \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 "$DEB_ROOT/usr/bin/python3.11" "$@"
}
py311 -c 'import kiln, numpy; print("kiln", kiln.__version__, "cuda:", kiln.cuda.is_available(),
kiln.cuda.device_count(), "numpy", numpy.__version__)'
rc=0
echo "=== pytest (tracer on)"
timeout 240 bash -c "set -o pipefail; $(declare -f py311); G='$G' DEB_ROOT='$DEB_ROOT' CUBLAS_DIR='$CUBLAS_DIR'; \
  py311 -m pytest -q -p no:cacheprovider --junitxml='$OUT/pytest.xml' tests/python 2>&1 \
  | tail -n 40" || rc=1
python3 scripts/junit_summary.py "$OUT/pytest.xml"  # counts, and that the CUDA legs ran
echo "=== pytest test_cuda.py (KILN_TRACE=0)"
KILN_TRACE=0 timeout 120 bash -c "set -o pipefail; $(declare -f py311); G='$G' DEB_ROOT='$DEB_ROOT' CUBLAS_DIR='$CUBLAS_DIR'; \
  py311 -m pytest -q -p no:cacheprovider tests/python/test_cuda.py 2>&1 | tail -n 15" || rc=1
echo "=== py_overhead"
timeout 60 bash -c "set -o pipefail; $(declare -f py311); G='$G' DEB_ROOT='$DEB_ROOT' CUBLAS_DIR='$CUBLAS_DIR'; \
  py311 bench/py_overhead.py --backend kiln" || rc=1
KILN_TRACE=0 timeout 60 bash -c "set -o pipefail; $(declare -f py311); G='$G' DEB_ROOT='$DEB_ROOT' CUBLAS_DIR='$CUBLAS_DIR'; \
  py311 bench/py_overhead.py --backend kiln" || rc=1
timeout 90 python3 bench/py_overhead.py --backend torch || rc=1
exit $rc
