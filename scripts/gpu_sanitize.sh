#!/usr/bin/env bash
# Run THERE (the GPU machine), through scripts/gpu_run.sh, which sets up the carried
# libraries' environment:
#
#   run(command="KILN_GPU_STEPS=sanitize bash scripts/gpu_run.sh", carry=[".gpu"], timeout_s=600)
#
# compute-sanitizer on the CUDA GoogleTest suites of the carried kiln_tests:
#
#   scripts/gpu_sanitize.sh memcheck     out-of-bounds / misaligned device accesses, ...
#   scripts/gpu_sanitize.sh racecheck    shared-memory hazards (block reductions)
#
# Prints one summary line per run ("compute-sanitizer <tool>: N errors ...") and appends
# it to $OUT/sanitize_summary.txt; the full report goes to $OUT/cs_<tool>.log and the
# gtest results to $OUT/cs_<tool>.xml. Exit status 0 only if the tool found no error and
# every test passed.
#
# Knobs: KILN_GPU_SANITIZE_FILTER (gtest filter, default the CUDA suites below),
# KILN_GPU_SANITIZE_TAG (a suffix for the report files and the summary line),
# KILN_GPU_SANITIZE_ARGS (extra compute-sanitizer flags, e.g. "--leak-check full"),
# COMPUTE_SANITIZER (the binary), KILN_TESTS_BIN (default .gpu/bin/kiln_tests),
# STEP_LIMIT_S (seconds for this run; gpu_run.sh sets it, default 150).
#
# API errors are not reported (--report-api-errors no): the fault tests provoke CUDA
# errors on purpose (out of memory, capture failures) and check kiln's handling of them.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
TOOL="${1:-memcheck}"
OUT="${OUT:-/tmp/kiln-gpu-out}"
mkdir -p "$OUT"
BIN="${KILN_TESTS_BIN:-$ROOT/.gpu/bin/kiln_tests}"
# racecheck only looks at shared memory: the suites whose kernels use it (block
# reductions, softmax, layer_norm, transpose tiles; fused row kernels), and it is slow.
FILTER="${KILN_GPU_SANITIZE_FILTER:-*Cuda*:*JitCuda*:*CudaCodegen*}"
[[ "$TOOL" == racecheck && -z "${KILN_GPU_SANITIZE_FILTER:-}" ]] &&
  FILTER='AllDTypes/CudaDType.*:CudaCodegen.*:JitCuda/JitCudaRows.*'
TAG="$TOOL${KILN_GPU_SANITIZE_TAG:+_$KILN_GPU_SANITIZE_TAG}"
LIMIT="${STEP_LIMIT_S:-150}"
SUMMARY="$OUT/sanitize_summary.txt"

say() {  # the summary line: stdout and the summary file
  echo "$*"
  echo "$*" >>"$SUMMARY"
}

case "$TOOL" in
  memcheck | racecheck) ;;
  *)
    echo "usage: scripts/gpu_sanitize.sh memcheck|racecheck" >&2
    exit 2
    ;;
esac

CS="${COMPUTE_SANITIZER:-}"
if [[ -z "$CS" ]]; then
  for c in /usr/local/cuda/bin/compute-sanitizer "$(command -v compute-sanitizer 2>/dev/null)" \
    /usr/local/cuda-*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer; do
    if [[ -n "$c" && -x "$c" ]]; then
      CS="$c"
      break
    fi
  done
fi
if [[ -z "$CS" ]]; then
  say "compute-sanitizer $TOOL: NOT RUN (no compute-sanitizer under /usr/local/cuda or on PATH)"
  exit 1
fi
if [[ ! -x "$BIN" ]]; then
  say "compute-sanitizer $TOOL: NOT RUN ($BIN missing: run scripts/gpu_prepare.sh here first)"
  exit 1
fi

# gpu_run.sh exports kiln_env (LD_LIBRARY_PATH for the carried libraries); without it
# the binary runs in the environment as it is.
runner=()
declare -F kiln_env >/dev/null && runner=(kiln_env)

tool_args=(--tool "$TOOL" --error-exitcode 99 --print-limit 100 --report-api-errors no)
if [[ "$TOOL" == racecheck ]]; then
  tool_args+=(--racecheck-report all)
fi
# shellcheck disable=SC2206  # word splitting of the extra flags is intended
tool_args+=(${KILN_GPU_SANITIZE_ARGS:-})
logf="$OUT/cs_$TAG.log"
xml="$OUT/cs_$TAG.xml"
rm -f "$xml"

# Stop the tool before the step's own limit, so that this script still prints its line.
limit=$((LIMIT > 30 ? LIMIT - 10 : LIMIT))
echo "$CS ($("$CS" --version 2>/dev/null | tail -n 1)); filter $FILTER; limit ${limit}s"
t0=$(date +%s)
"${runner[@]}" timeout --signal=TERM --kill-after=5 "$limit" \
  "$CS" "${tool_args[@]}" --log-file "$logf" \
  "$BIN" --gtest_filter="$FILTER" --gtest_brief=1 --gtest_output="xml:$xml"
rc=$?
dt=$(($(date +%s) - t0))

# compute-sanitizer's own count: "========= ERROR SUMMARY: N errors" (memcheck) and
# "========= RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)" (racecheck).
errors="$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$logf" 2>/dev/null | tail -n 1 | grep -oE '[0-9]+')"
hazards="$(grep -oE 'RACECHECK SUMMARY: .*' "$logf" 2>/dev/null | tail -n 1)"
if [[ "$TOOL" == racecheck && -n "$hazards" ]]; then
  errors="$(echo "$hazards" | grep -oE '\([0-9]+ error' | grep -oE '[0-9]+')"
fi
tests="$(python3 - "$xml" <<'PYEOF'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print("no gtest report")
    sys.exit()
cases = list(root.iter("testcase"))
failed = [c for c in cases if c.find("failure") is not None]
skipped = [c for c in cases if c.find("skipped") is not None or c.get("result") == "skipped"]
print(f"gtest {len(cases)} tests, {len(cases) - len(failed) - len(skipped)} passed, "
      f"{len(failed)} failed, {len(skipped)} skipped")
PYEOF
)"

status="${errors:-?} errors"
[[ -n "$hazards" ]] && status="$status (${hazards#RACECHECK SUMMARY: })"
((rc == 124 || rc == 137)) && status="$status, TIMEOUT after ${dt}s (partial)"
say "compute-sanitizer $TAG: $status; $tests; exit $rc; ${dt}s"
# The first reports, for the log tail the device tool returns.
grep -m 6 -E '^========= (Invalid|Error|Race|Warning|Program hit)' "$logf" 2>/dev/null |
  sed 's/^/    /'
[[ "$errors" == 0 && (rc -eq 0) ]]
