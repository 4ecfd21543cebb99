#!/usr/bin/env bash
# Runs kiln's C++ benchmarks (eager per-op overhead, CPU pointwise bandwidth) and prints
# a compact table (medians). Build first (scripts/setup.sh). JSON lands next to the
# binaries, in <build>/bench/.
#
#   bench/run_cpu.sh                      all benchmarks, 5 repetitions each
#   BENCH_REPS=1 bench/run_cpu.sh         quicker
#   BENCH_FILTER=kiln bench/run_cpu.sh    only benchmarks whose name matches
#   KILN_BUILD_DIR=build-gpu bench/run_cpu.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${KILN_BENCH_BIN:-$ROOT/${KILN_BUILD_DIR:-build}/bench}"
OUTDIR="${KILN_BENCH_OUT:-$BIN}"
REPS="${BENCH_REPS:-5}"
MIN_TIME="${BENCH_MIN_TIME:-0.2}"  # benchmark 1.7: seconds, no 's' suffix
FILTER="${BENCH_FILTER:-.}"

mkdir -p "$OUTDIR"
jsons=()
for b in bench_eager_overhead bench_cpu_bandwidth; do
  if [[ ! -x "$BIN/$b" ]]; then
    echo "[bench] $BIN/$b not built; run scripts/setup.sh first" >&2
    exit 1
  fi
  echo "[bench] running $b ($REPS repetitions, min time $MIN_TIME s)" >&2
  "$BIN/$b" --benchmark_filter="$FILTER" --benchmark_min_time="$MIN_TIME" \
    --benchmark_repetitions="$REPS" --benchmark_report_aggregates_only=true \
    --benchmark_out="$OUTDIR/$b.json" --benchmark_out_format=json \
    >"$OUTDIR/$b.txt" 2>&1 || { cat "$OUTDIR/$b.txt" >&2; exit 1; }
  jsons+=("$OUTDIR/$b.json")
done
python3 "$ROOT/bench/bench_table.py" "${jsons[@]}"
