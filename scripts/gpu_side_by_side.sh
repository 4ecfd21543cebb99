#!/usr/bin/env bash
# A full device call on a 4-GPU kind (nvidia-h100-x4 or -h200-x4), runs side by side:
# the models table (GPU 0), the pytest suite's CUDA legs (GPU 1), replay agreement on the GPT and the
# KILN_VERIFY=1 runs of cnn/lstm/block (GPU 2), the CUDA gtests (GPU 3); then kiln's DDP
# sweep over the 4 GPUs and PyTorch's.
set -u
O="${OUT:-/tmp/out}"; mkdir -p "$O"
run_part() { local name="$1" lim="$2"; shift 2; echo "##### $name"; timeout -k 5 "$lim" "$@" > "$O/$name.log" 2>&1; echo "rc=$? ($name)"; }
# The pytest suite in two shards (one alone took over 300 s beside the other jobs).
SHARD1="$(echo tests/python/test_[a-m]*.py)"
SHARD2="$(echo tests/python/test_[n-z]*.py) tests/python/compat"
(KILN_PYTEST_PATHS="$SHARD1" KILN_DEB_ROOT=/tmp/kilndeb1 CUDA_VISIBLE_DEVICES=1 OUT="$O/t" KILN_GPU_BUDGET_S=300 KILN_GPU_STEPS=pytest-only run_part pytest 305 bash scripts/gpu_run.sh) &
(sleep 15; KILN_PYTEST_PATHS="$SHARD2" KILN_DEB_ROOT=/tmp/kilndeb5 CUDA_VISIBLE_DEVICES=3 OUT="$O/u" KILN_GPU_BUDGET_S=300 KILN_GPU_STEPS=pytest-only run_part pytest2 305 bash scripts/gpu_run.sh) &
(sleep 5; KILN_DEB_ROOT=/tmp/kilndeb2 CUDA_VISIBLE_DEVICES=2 OUT="$O/a" KILN_GPU_BUDGET_S=150 KILN_GPU_STEPS=script KILN_GPU_SCRIPT="bench/models/replay_agreement.py --device cuda --only gpt --steps 40" run_part agreement 155 bash scripts/gpu_run.sh;
 KILN_DEB_ROOT=/tmp/kilndeb2 CUDA_VISIBLE_DEVICES=2 OUT="$O/v" KILN_GPU_BUDGET_S=150 KILN_GPU_STEPS=models KILN_MODELS_ARGS="--only cnn,lstm,block --systems torch_eager --timeout 140" run_part verify_rest 155 bash scripts/gpu_run.sh) &
(sleep 10; KILN_DEB_ROOT=/tmp/kilndeb3 CUDA_VISIBLE_DEVICES=3 OUT="$O/g" KILN_GPU_GTEST_FILTER='*Cuda*:*CUDA*:*cuda*:*Gpu*:*Device*:*Background*:JitInPlace*:PipelinedReplay*:Symbolic*' KILN_GPU_BUDGET_S=200 KILN_GPU_STEPS=gtest run_part gtest 205 bash scripts/gpu_run.sh) &
CUDA_VISIBLE_DEVICES=0 OUT="$O/m" KILN_GPU_BUDGET_S=290 KILN_GPU_STEPS=models KILN_MODELS_ARGS="--only gpt,cnn,lstm,block --no-verify --timeout 150" run_part models 295 bash scripts/gpu_run.sh
wait
OUT="$O/d" KILN_GPU_BUDGET_S=160 KILN_GPU_STEPS=script KILN_GPU_SCRIPT="bench/distributed_gpu.py --sweep" run_part dist_kiln 165 bash scripts/gpu_run.sh
run_part dist_torch 100 python3 bench/distributed_gpu.py --sweep --framework torch
sed -n '/| model |/,$p' "$O/models.log" | grep -v "^$" | head -40
grep -E "agree|DISAGREE|failed" "$O/agreement.log" | head -3
grep -E "KILN_VERIFY" "$O/verify_rest.log" | sort -u | head -4
grep -E "tests,|CUDA cases|CUDA legs|FAILED|Failure|TIMEOUT" "$O/gtest.log" "$O/pytest.log" "$O/pytest2.log" | head -24
grep -E "^\| (kiln|torch)" "$O/dist_kiln.log" "$O/dist_torch.log" | head -12
rm -rf "$O/t" "$O/u" "$O/a" "$O/v" "$O/g" "$O/m" "$O/d"
