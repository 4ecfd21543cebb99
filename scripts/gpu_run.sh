#!/usr/bin/env bash
# shellcheck disable=SC2317  # the step functions run through `bash -c` (exported)
# Run THERE: on the lent GPU machine, in the repo root, with .gpu/ carried (build it
# here first with scripts/gpu_prepare.sh). Through the device tool:
#
#   run(command="bash scripts/gpu_run.sh", carry=[".gpu"], timeout_s=600)
#
# It unpacks the carried .deb files under /tmp/kilndeb (never into /), then runs:
#   1. kiln_tests (every GoogleTest suite; the CUDA ones run for real there)
#   2. kiln_demo (CPU and GPU, with its CPU-vs-GPU agreement check)
#   3. the pytest suite under the carried Python 3.11 (the Boost.Python module is built
#      for 3.11; the machine's own python3 is 3.12 with PyTorch 2.11): without torch the
#      torch-oracle tests skip and the CUDA legs (tests/python/test_cuda_legs_*.py:
#      CUDA against kiln's CPU) run; the summary counts the CUDA cases that ran
#      (scripts/junit_summary.py)
#   4. the C++ benchmarks (eager overhead incl. the CUDA tiny op; CPU bandwidth)
#   5. bench/py_overhead.py, if present: kiln on python3.11, PyTorch on python3
#   6. bench/gpu_workloads.py, if present: the GPU workloads of BENCHMARKS.md, kiln eager
#      and traced (workers under python3.11) against PyTorch eager and torch.compile
#      (workers under python3), one table; JSON to $OUT/gpu_workloads.json
# and prints a summary table last (the tool returns only the output's last 12,000
# characters). Logs, JUnit XML and benchmark JSON go to $OUT (at most 8 files).
# KILN_GPU_STEPS=tests runs steps 1-3 and the demos only (no benchmarks);
# KILN_GPU_STEPS=train adds the training-step table (bench/training_step.py);
# KILN_GPU_STEPS=ab runs only the A/B of the GPU workloads (kiln eager and traced) between
# the build before a change (.gpu-base/: libkiln.so.xz and python/, carried too) and
# .gpu/, interleaved (bench/ab_builds.py, KILN_GPU_AB_ROUNDS rounds, default 2);
# KILN_GPU_STEPS=models runs only the real-models table (bench/models/run.py: GPT, CNN,
# transformer-block inference, LSTM LM; kiln traced/eager vs PyTorch eager/torch.compile,
# KILN_VERIFY=1 runs; extra arguments in KILN_MODELS_ARGS, e.g. "--only gpt");
# KILN_GPU_STEPS=bench runs the real-models table (KILN_GPU_MODELS_S seconds, default 400)
# and then the GPU workloads (extra arguments in KILN_WORKLOADS_ARGS, e.g. "--only attention");
# KILN_GPU_STEPS=gtest runs only the gtests matching KILN_GPU_GTEST_FILTER;
# KILN_GPU_STEPS=probe runs the gtests matching KILN_GPU_GTEST_FILTER (also honoured by the
# full run), then the real-models table (KILN_MODELS_ARGS): a quick check of one change;
# KILN_GPU_STEPS=sanitize runs only compute-sanitizer memcheck and racecheck on the CUDA
# gtests (scripts/gpu_sanitize.sh; 300 s for both), one summary line per tool;
# KILN_GPU_STEPS=reliability runs both tools and then the differential fuzzer's CUDA legs
# (kiln_fuzz --device cuda, KILN_GPU_FUZZ_SECONDS, default 150; a mismatch's shrunk case
# is saved to $OUT/fuzz_cases; KILN_GPU_FUZZ_REPLAY replays given case files after it;
# KILN_GPU_SANITIZE_TOOLS picks the tools, default "memcheck racecheck").
# Each step has a time limit and the whole run stays inside KILN_GPU_BUDGET_S
# (default 590 s), so the summary is printed even when a step hangs.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
OUT="${OUT:-/tmp/kiln-gpu-out}"
mkdir -p "$OUT"
G="$ROOT/.gpu"
DEB_ROOT="${KILN_DEB_ROOT:-/tmp/kilndeb}"  # KILN_DEB_ROOT: runs side by side need their own
BUDGET_S="${KILN_GPU_BUDGET_S:-590}"
START_S=$(date +%s)
SUMMARY="$OUT/summary.txt"

declare -a STEP_ROWS=()
FAILED=0

left_s() { echo $((BUDGET_S - ($(date +%s) - START_S))); }

# step NAME MAX_SECONDS CMD...: runs CMD under a time limit (the smaller of MAX_SECONDS
# and what is left of the budget, given to CMD as STEP_LIMIT_S), records status and
# duration for the summary.
step() {
  local name="$1" max="$2"
  shift 2
  local left
  left=$(($(left_s) - 15))
  if ((left < 10)); then
    STEP_ROWS+=("$(printf '%-28s %-10s %6s' "$name" "NOT RUN" "-") (out of time budget)")
    echo "=== $name: skipped, time budget spent"
    return 0
  fi
  ((max > left)) && max=$left
  echo
  echo "=== $name (limit ${max}s)"
  local t0 rc
  t0=$(date +%s)
  # Functions run in a child bash (timeout needs a program); they are exported below.
  STEP_LIMIT_S="$max" timeout --kill-after=10 "$max" bash -c "$*"
  rc=$?
  local dt=$(($(date +%s) - t0)) status=ok
  ((rc == 0)) || { status="FAIL($rc)"; FAILED=$((FAILED + 1)); }
  ((rc == 124 || rc == 137)) && status="TIMEOUT"
  STEP_ROWS+=("$(printf '%-28s %-10s %5ss' "$name" "$status" "$dt")")
  return 0
}

# The environment the carried binaries and Python need (not used for the machine's
# own python3, which must not see Debian's libraries).
# cuBLAS 13 comes from the machine: the toolkit's folder, else PyTorch's wheel copy.
CUBLAS_DIR=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  if [[ -e "$d/libcublas.so.13" ]]; then CUBLAS_DIR="$d"; break; fi
done
if [[ -z "$CUBLAS_DIR" ]]; then
  f="$(find /usr/local /opt -name 'libcublas.so.13*' 2>/dev/null | head -n 1)"
  [[ -n "$f" ]] && CUBLAS_DIR="$(dirname "$f")"
fi
kiln_env() {
  local cuda_dirs="${CUBLAS_DIR:+:$CUBLAS_DIR}"
  env LD_LIBRARY_PATH="$G/lib:$DEB_ROOT/usr/lib/x86_64-linux-gnu/openblas-pthread:$DEB_ROOT/usr/lib/x86_64-linux-gnu$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$@"
}
PY311="$DEB_ROOT/usr/bin/python3.11"
# KILN_GPU_WRAP: a command the carried python runs under (ncu and its flags, for instance).
py311() {
  # shellcheck disable=SC2086  # the wrapper and its flags
  kiln_env PYTHONHOME="$DEB_ROOT/usr" \
    PYTHONPATH="$G/python:$DEB_ROOT/usr/lib/python3/dist-packages" \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 ${KILN_GPU_WRAP:-} "$PY311" "$@"
}

setup_step() {
  rm -rf "$DEB_ROOT"
  mkdir -p "$DEB_ROOT"
  # A library carried compressed (a build with the LLVM JIT is over the carry limit raw).
  local xzf
  for xzf in "$G"/lib/*.so*.xz; do
    [[ -f "$xzf" ]] || continue
    python3 -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.open(sys.argv[1]).read())' \
      "$xzf" "${xzf%.xz}" && echo "decompressed ${xzf##*/}"
  done
  local n=0
  for f in "$G"/debs/*.deb; do
    dpkg -x "$f" "$DEB_ROOT" && n=$((n + 1))
  done
  echo "unpacked $n .deb files into $DEB_ROOT"
  nvidia-smi -L || echo "nvidia-smi failed"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  echo "host: $(nproc) cores; $(uname -r); python3: $(python3 --version 2>&1)"
  echo "carried python: $(py311 --version 2>&1)"
  local missing=0
  echo "cuBLAS from: ${CUBLAS_DIR:-NOT FOUND}"
  for f in "$G"/lib/libkiln.so "$G"/bin/*; do
    [[ -f "$f" ]] || { echo "MISSING $f"; missing=1; continue; }
    local nf
    nf="$(kiln_env ldd "$f" 2>&1 | grep 'not found')"
    if [[ -n "$nf" ]]; then
      echo "UNRESOLVED libraries for $f:"
      echo "$nf"
      missing=1
    fi
  done
  ((missing == 0)) && echo "all carried binaries resolve their libraries"
  return "$missing"
}

tests_step() {
  kiln_env "$G/bin/kiln_tests" --gtest_output="xml:$OUT/gtest.xml" --gtest_brief=1 \
    --gtest_filter="${KILN_GPU_GTEST_FILTER:-*}"
}

demo_step() { kiln_env "$G/bin/kiln_demo"; }

# The Python demo (examples/demo.py): the plot (SVG: no matplotlib here) and the Chrome
# trace land in $OUT/demo.
demo_py_step() { py311 examples/demo.py --out "$OUT/demo"; }

pytest_step() {
  if [[ ! -d "$G/python" ]]; then
    echo "no .gpu/python: the Python module was not carried"
    return 1
  fi
  py311 -c 'import kiln, numpy; print("kiln from", kiln.__file__, "numpy", numpy.__version__)' || return 1
  # shellcheck disable=SC2086  # KILN_PYTEST_ARGS: extra pytest arguments (-k ..., -x);
  # KILN_PYTEST_PATHS: the test files or folders (default tests/python; a shard of it)
  py311 -m pytest -q -p no:cacheprovider --junitxml="$OUT/pytest.xml" ${KILN_PYTEST_ARGS:-} \
    ${KILN_PYTEST_PATHS:-tests/python}
}

bench_step() {
  kiln_env "$G/bin/bench_eager_overhead" --benchmark_min_time=0.2 --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true \
    --benchmark_out="$OUT/bench_eager_overhead.json" --benchmark_out_format=json || return 1
  kiln_env "$G/bin/bench_cpu_bandwidth" --benchmark_min_time=0.2 --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true \
    --benchmark_out="$OUT/bench_cpu_bandwidth.json" --benchmark_out_format=json
}

py_overhead_kiln_step() {  # tracer on (the default), then plain eager dispatch
  py311 bench/py_overhead.py --backend kiln 2>&1 | tee -a "$OUT/py_overhead.txt" &&
    KILN_TRACE=0 py311 bench/py_overhead.py --backend kiln 2>&1 | tee -a "$OUT/py_overhead.txt"
}
py_overhead_torch_step() {
  PYTHONUNBUFFERED=1 python3 bench/py_overhead.py --backend torch 2>&1 | tee -a "$OUT/py_overhead.txt"
}

# The GPU workloads: the script runs under python3 (PyTorch) and starts kiln's workers
# through a wrapper that runs the carried 3.11 with kiln's environment (py311 above).
# It stops its workers and prints its tables before its --budget is spent.
make_kiln_python() {
  local kiln_python="$DEB_ROOT/kiln-python3.11"
  {
    echo '#!/usr/bin/env bash'
    declare -p G DEB_ROOT PY311 CUBLAS_DIR
    declare -f kiln_env py311
    echo 'py311 "$@"'
  } >"$kiln_python"
  chmod +x "$kiln_python"
  echo "$kiln_python"
}
gpu_workloads_step() {
  # shellcheck disable=SC2086  # KILN_WORKLOADS_ARGS: extra arguments (--only attention ...)
  PYTHONUNBUFFERED=1 python3 bench/gpu_workloads.py --kiln-python "$(make_kiln_python)" \
    --budget $((${STEP_LIMIT_S:-300} - 15)) --json "$OUT/gpu_workloads.json" \
    ${KILN_WORKLOADS_ARGS:-}
}
# A/B against the build before a change: .gpu-base/ unpacked under /tmp/kiln-base, a
# second kiln interpreter pointing at it, bench/ab_builds.py alternating the two.
ab_step() {
  local base=/tmp/kiln-base
  rm -rf "$base" && mkdir -p "$base/lib" || return 1
  python3 -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.open(sys.argv[1]).read())' \
    "${G%/.gpu}/.gpu-base/libkiln.so.xz" "$base/lib/libkiln.so" || return 1
  cp -r "${G%/.gpu}/.gpu-base/python" "$base/python"
  local b_python a_python
  b_python="$(make_kiln_python)"
  a_python="$DEB_ROOT/kiln-base-python3.11"
  sed "s|^declare -- G=.*|declare -- G=\"$base\"|" "$b_python" >"$a_python"
  chmod +x "$a_python"
  PYTHONUNBUFFERED=1 python3 bench/ab_builds.py --rounds "${KILN_GPU_AB_ROUNDS:-2}" \
    --a-args "--kiln-python $a_python" --b-args "--kiln-python $b_python" \
    --json "$OUT/ab_gpu.json" -- bench/gpu_workloads.py --quick \
    --systems kiln_eager,kiln_traced --budget 100 | tee "$OUT/ab_gpu.txt"
}
# Memory stability (tests/stability): 100k CPU and 10k CUDA iterations of a traced
# training loop, resident and device memory sampled after warmup.
memory_step() {
  kiln_env "$G/bin/kiln_memory_stability" --iterations 100000 --cuda-iterations 10000 \
    --samples 20 --shapes 2000 | tee "$OUT/memory_stability.txt"
}
# Training steps (bench/training_step.py): kiln eager / traced vs PyTorch eager /
# torch.compile, one table.
training_step() {
  PYTHONUNBUFFERED=1 python3 bench/training_step.py --device cuda \
    --kiln-python "$(make_kiln_python)" --torch-python python3 \
    --timeout $((${STEP_LIMIT_S:-300} / 4)) --json "$OUT/training_step.json" ${KILN_TRAIN_ARGS:-} |
    tee "$OUT/training_step.txt"
}

# Real models (bench/models/run.py), the GPU sizes: kiln workers under the carried 3.11,
# PyTorch's under python3; one table, every figure in $OUT/models.json.
models_step() {
  # shellcheck disable=SC2086  # KILN_MODELS_ARGS: extra arguments (--only gpt,cnn ...)
  PYTHONUNBUFFERED=1 python3 bench/models/run.py --device cuda \
    --kiln-python "$(make_kiln_python)" --torch-python python3 --timeout 150 \
    --budget $((${STEP_LIMIT_S:-300} - 15)) --json "$OUT/models.json" ${KILN_MODELS_ARGS:-} |
    tee "$OUT/models.txt"
}

# GPT's step losses, kiln traced against kiln eager, 50 steps, fp32 and bf16 autocast.
loss_agreement_step() { py311 bench/models/loss_agreement.py --device cuda | tee "$OUT/loss_agreement.txt"; }
# compute-sanitizer (scripts/gpu_sanitize.sh) on the CUDA gtests, one tool per step.
sanitize_step() { bash scripts/gpu_sanitize.sh "$1"; }
# The differential fuzzer with its CUDA legs (eager and NVRTC-compiled on the GPU, against
# CPU eager and the CPU tracer); the GPU build has no LLVM, so the CPU JIT leg is absent.
fuzz_cuda_step() {
  mkdir -p "$OUT/fuzz_cases"
  kiln_env "$G/bin/kiln_fuzz" --device cuda --seed "${KILN_GPU_FUZZ_SEED:-$(date +%s)}" \
    --seconds "${KILN_GPU_FUZZ_SECONDS:-150}" --save-dir "$OUT/fuzz_cases" 2>&1 |
    tee "$OUT/fuzz_cuda.txt" | grep -vE '^\[kiln_fuzz\] [0-9]+ programs'
  local rc="${PIPESTATUS[0]}" f
  # One file for all the shrunk cases (the device tool returns at most 8 files).
  if compgen -G "$OUT/fuzz_cases/*.fuzz" >/dev/null; then
    tar -C "$OUT" -czf "$OUT/fuzz_cases.tgz" fuzz_cases && rm -rf "$OUT/fuzz_cases"
  else
    rm -rf "$OUT/fuzz_cases"
  fi
  # KILN_GPU_FUZZ_REPLAY: saved cases to replay too (with KILN_LOGS=$KILN_GPU_FUZZ_LOGS).
  for f in ${KILN_GPU_FUZZ_REPLAY:-}; do
    KILN_LOGS="${KILN_GPU_FUZZ_LOGS:-}" kiln_env "$G/bin/kiln_fuzz" --replay "$f" 2>&1 | tail -n 60
    ((PIPESTATUS[0] == 0)) || rc=1
  done
  return "$rc"
}

export OUT G DEB_ROOT PY311 CUBLAS_DIR
export -f kiln_env py311 loss_agreement_step sanitize_step fuzz_cuda_step setup_step tests_step demo_step demo_py_step pytest_step bench_step \
  py_overhead_kiln_step py_overhead_torch_step gpu_workloads_step make_kiln_python training_step memory_step \
  models_step ab_step

summary() {
  echo
  echo "==================== kiln GPU run summary ===================="
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1
  printf '%-28s %-10s %6s\n' "step" "status" "time"
  printf '%s\n' "${STEP_ROWS[@]}"
  echo "-- test counts"
  python3 scripts/junit_summary.py "$OUT/gtest.xml" "$OUT/pytest.xml"
  echo "-- C++ benchmarks (medians of 3)"
  python3 bench/bench_table.py "$OUT/bench_eager_overhead.json" "$OUT/bench_cpu_bandwidth.json"
  if [[ -s "$OUT/py_overhead.txt" ]]; then
    echo "-- Python per-op overhead"
    cat "$OUT/py_overhead.txt"
  fi
  if [[ -s "$OUT/sanitize_summary.txt" ]]; then
    echo "-- compute-sanitizer (scripts/gpu_sanitize.sh; reports in cs_<tool>.log)"
    cat "$OUT/sanitize_summary.txt"
  fi
  if [[ -s "$OUT/training_step.txt" ]]; then
    echo "-- training steps (bench/training_step.py)"
    cat "$OUT/training_step.txt"
  fi
  if [[ -s "$OUT/ab_gpu.txt" ]]; then
    echo "-- A/B, build before (A) vs after (B) (bench/ab_builds.py)"
    cat "$OUT/ab_gpu.txt"
  fi
  if [[ -s "$OUT/models.txt" ]]; then
    echo "-- real models (bench/models/run.py)"
    cat "$OUT/models.txt"
  fi
  if [[ -s "$OUT/gpu_workloads.json" ]]; then
    echo "-- GPU workloads (bench/gpu_workloads.py; full report in gpu_run.log)"
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["tables"])' \
      "$OUT/gpu_workloads.json"
  fi
  echo "total: $(($(date +%s) - START_S)) s; files in \$OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
}

main() {
  step "unpack + environment" 120 setup_step
  # The carried Python with kiln's environment, for commands after this script (probes):
  # $KILN_DEB_ROOT/kiln-python3.11 (default /tmp/kilndeb/kiln-python3.11).
  make_kiln_python >/dev/null
  if [[ "${KILN_GPU_STEPS:-all}" == script ]]; then  # KILN_GPU_SCRIPT under python3.11
    # shellcheck disable=SC2086  # the script and its arguments
    step "script (python3.11)" 300 py311 $KILN_GPU_SCRIPT
    return
  fi
  if [[ "${KILN_GPU_STEPS:-all}" == gtest ]]; then  # the gtests matching KILN_GPU_GTEST_FILTER
    step "kiln_tests (gtest, ${KILN_GPU_GTEST_FILTER:-*})" 300 tests_step
    summary | tee "$SUMMARY"
    ((FAILED == 0))
    return
  fi
  if [[ "${KILN_GPU_STEPS:-all}" == pytest-only ]]; then  # the pytest suite alone
    step "pytest (python3.11)" 300 pytest_step
    summary | tee "$SUMMARY"
    ((FAILED == 0))
    return
  fi
  if [[ "${KILN_GPU_STEPS:-all}" == sanitize || "${KILN_GPU_STEPS:-all}" == reliability ]]; then
    for tool in ${KILN_GPU_SANITIZE_TOOLS:-memcheck racecheck}; do
      if [[ "$tool" == memcheck ]]; then
        step "compute-sanitizer memcheck" 180 sanitize_step memcheck
      elif [[ "$tool" == racecheck ]]; then
        step "compute-sanitizer racecheck" 240 sanitize_step racecheck
      fi  # anything else ("none"): no compute-sanitizer run
    done
    if [[ "${KILN_GPU_STEPS:-all}" == reliability ]]; then
      step "kiln_fuzz (CUDA legs)" $((${KILN_GPU_FUZZ_SECONDS:-150} + 30)) fuzz_cuda_step
      [[ -s "$OUT/fuzz_cuda.txt" ]] && grep -E 'done:|mismatch|MISMATCH' "$OUT/fuzz_cuda.txt" | tail -n 5
    fi
    summary | tee "$SUMMARY"
    ((FAILED == 0))
    return
  fi
  if [[ "${KILN_GPU_STEPS:-all}" == ab ]]; then  # A/B of the GPU workloads, old vs new build
    step "A/B GPU workloads" 480 ab_step
    summary | tee "$SUMMARY"
    ((FAILED == 0))
    return
  fi
  if [[ "${KILN_GPU_STEPS:-all}" == probe ]]; then  # filtered gtests, then the models table
    step "kiln_tests (gtest, ${KILN_GPU_GTEST_FILTER:-*})" 240 tests_step
    step "real models bench" 540 models_step
    summary | tee "$SUMMARY"
    ((FAILED == 0))
    return
  fi
  if [[ "${KILN_GPU_STEPS:-all}" == bench ]]; then  # the models table, then GPU workloads
    step "real models bench" "${KILN_GPU_MODELS_S:-400}" models_step
    step "GPU workloads" 300 gpu_workloads_step
    step "GPT losses traced vs eager" 120 loss_agreement_step
    summary | tee "$SUMMARY"
    ((FAILED == 0))
    return
  fi
  if [[ "${KILN_GPU_STEPS:-all}" == models ]]; then  # the real-models table alone
    step "real models bench" 540 models_step
    summary | tee "$SUMMARY"
    ((FAILED == 0))
    return
  fi
  if [[ "${KILN_GPU_STEPS:-all}" == train-only ]]; then  # the training table alone
    step "training step bench" 300 training_step
    summary | tee "$SUMMARY"
    ((FAILED == 0))
    return
  fi
  step "kiln_tests (gtest)" 300 tests_step
  step "kiln_demo" 60 demo_step
  step "demo.py (python3.11)" 120 demo_py_step
  step "pytest (python3.11)" 180 pytest_step
  if [[ "${KILN_GPU_STEPS:-all}" == train ]]; then  # + the training table and memory run
    step "training step bench" 240 training_step
    step "memory stability" 150 memory_step
  fi
  if [[ "${KILN_GPU_STEPS:-all}" == tests || "${KILN_GPU_STEPS:-all}" == train ]]; then
    summary | tee "$SUMMARY"
    ((FAILED == 0))
    return
  fi
  step "C++ benchmarks" 120 bench_step
  if [[ -f bench/py_overhead.py ]]; then
    step "py_overhead kiln (3.11)" 60 py_overhead_kiln_step
    step "py_overhead torch (3.12)" 60 py_overhead_torch_step
  else
    STEP_ROWS+=("$(printf '%-28s %-10s %6s' "py_overhead" "NOT RUN" "-") (bench/py_overhead.py absent)")
  fi
  if [[ -f bench/gpu_workloads.py ]]; then
    step "GPU workloads" 300 gpu_workloads_step
  else
    STEP_ROWS+=("$(printf '%-28s %-10s %6s' "GPU workloads" "NOT RUN" "-") (bench/gpu_workloads.py absent)")
  fi
  summary | tee "$SUMMARY"
  ((FAILED == 0))  # the exit status: 0 only if every step passed
}

main 2>&1 | tee "$OUT/gpu_run.log"
exit "${PIPESTATUS[0]}"
