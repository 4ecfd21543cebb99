#!/usr/bin/env python3
"""Data-parallel scaling of bench/models' GPT (nanoGPT's baby GPT, the "gpu" size: 6
layers, 384 wide, block 256, batch 16 per GPU, 2 micro-steps, AdamW, clip_grad_norm_,
loss.item() every step) over NCCL: one process per GPU, DistributedDataParallel, the
gradient all-reduce on the last micro-step only (nanoGPT's require_backward_grad_sync).
Weak scaling: every GPU keeps its batch, so an ideal per-GPU step time is flat.

    # one line per world size; rank 0 prints it (and --json appends it)
    for n in 1 2 4 8; do
      PYTHONPATH=build/python python3 -m kiln.distributed.run --standalone \
          --nproc_per_node $n bench/distributed_gpu.py --json dist_gpu.jsonl
    done
    # the same with PyTorch's DDP for comparison: --framework torch (torchrun works too)
    # world size 1 without DDP (no process group): --no-ddp; kiln's trace report: --explain

    # or all of it, driven from one process: --no-ddp, then world sizes 1, 2, 4, ...
    # up to the GPUs present (each through the launcher), and a table at the end
    python3 bench/distributed_gpu.py --sweep [--json dist_gpu.jsonl] [--framework torch]
    # on the lent GPU machine (kiln under the carried python3.11, scripts/gpu_run.sh):
    #   KILN_GPU_STEPS=script KILN_GPU_SCRIPT="bench/distributed_gpu.py --sweep" \
    #       bash scripts/gpu_run.sh
    #   python3 bench/distributed_gpu.py --sweep --framework torch     (PyTorch's DDP)

Per-GPU step time: the median over --repeats loops of --steps steps after --warmup steps
(the tracer's warmup and compiles), each loop timed on every rank between two device
syncs; the table shows the median over ranks and the slowest rank.
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "models"))


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--framework", choices=("kiln", "torch"), default="kiln")
    p.add_argument("--size", default="gpu", choices=("gpu", "cpu"))
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu: a dry run of this script over the gloo backend")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--no-ddp", action="store_true", help="world size 1, no process group")
    p.add_argument("--explain", action="store_true", help="rank 0 prints kiln.explain()")
    p.add_argument("--json", help="append rank 0's result as one JSON line")
    p.add_argument("--sweep", action="store_true",
                   help="run --no-ddp and world sizes 1, 2, 4, ... (up to the GPUs present)")
    return p.parse_args()


def sweep(args):
    """Each configuration in its own processes (through the launcher); rows collected from
    a JSON-lines file and printed as one table."""
    import subprocess
    import tempfile

    if not os.environ.get("KILN_NCCL_LIBRARY"):  # PyTorch's NCCL of the machine's python3
        try:
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH")}
            lib = subprocess.run(
                ["python3", "-c", "import nvidia.nccl, os; print(os.path.join("
                 "list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))"],
                capture_output=True, text=True, timeout=60, env=env).stdout.strip()
            if lib and os.path.isfile(lib):
                os.environ["KILN_NCCL_LIBRARY"] = lib
        except (OSError, subprocess.SubprocessError):
            pass
    print(f"NCCL: {os.environ.get('KILN_NCCL_LIBRARY', 'default search')}", flush=True)
    if args.framework == "kiln":
        import kiln

        gpus = kiln.cuda.device_count()
    else:
        import torch

        gpus = torch.cuda.device_count()
    rows_file = args.json or tempfile.mktemp(suffix=".jsonl")
    if args.device == "cpu":
        gpus = 2
    common = ["--framework", args.framework, "--size", args.size, "--device", args.device,
              "--warmup", str(args.warmup),
              "--steps", str(args.steps), "--repeats", str(args.repeats), "--dropout",
              str(args.dropout), "--json", rows_file]
    me = os.path.abspath(__file__)
    runs = [[sys.executable, me, "--no-ddp"] + common]
    n = 1
    while n <= gpus:
        # PyTorch's workers go through kiln's launcher file too (run as a plain script it
        # needs no kiln module; Debian's torchrun 1.13 fails on Python 3.11)
        launcher = ["-m", "kiln.distributed.run"] if args.framework == "kiln" else [
            os.path.join(os.path.dirname(HERE), "python_bindings", "kiln", "distributed", "run.py")]
        runs.append([sys.executable] + launcher + ["--standalone",
                     "--nproc_per_node", str(n), me] + common + (["--explain"] if n == 1 else []))
        n *= 2
    for cmd in runs:
        print("$", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, timeout=900)
    rows = [json.loads(line) for line in open(rows_file)] if os.path.exists(rows_file) else []
    base = next((r["step_ms_median"] for r in rows if r["world_size"] == 1 and r["ddp"]), None)
    print("\n| framework | world size | DDP | per-GPU step ms (median of ranks) | slowest rank "
          "| vs world 1 | tokens/s (all GPUs) |\n|---|---|---|---|---|---|---|")
    for r in rows:
        rel = f"{r['step_ms_max'] / base:.2f}x" if base else "-"
        print(f"| {r['framework']} | {r['world_size']} | {'on' if r['ddp'] else 'off'} | "
              f"{r['step_ms_median']:.2f} | {r['step_ms_max']:.2f} | {rel} | "
              f"{r['tokens_per_s']:.0f} |")


def main():
    args = parse()
    if args.sweep:
        return sweep(args)
    if args.framework == "kiln":
        import kiln as fw
    else:
        import torch as fw

        fw.backends.cuda.matmul.allow_tf32 = False
    import compat
    import gpt

    compat.prepare(fw)
    dist = fw.distributed
    local = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = args.device == "cuda"
    device = f"cuda:{local}" if cuda else "cpu"
    if args.framework == "torch" and cuda:
        fw.cuda.set_device(local)
    ddp = None
    if not args.no_ddp:
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    case = gpt.make(fw, device, args.size, dropout=args.dropout, seed=1337 + local)
    if not args.no_ddp:
        ddp = fw.nn.parallel.DistributedDataParallel(case.model,
                                                     device_ids=[local] if cuda else None)
        case.forward = ddp

    def step():
        for micro in range(case.grad_accum):
            if ddp is not None:
                ddp.require_backward_grad_sync = micro == case.grad_accum - 1
            _, loss = case.forward(case.X, case.Y)
            loss = loss / case.grad_accum
            case.X, case.Y = case.get_batch()
            loss.backward()
        fw.nn.utils.clip_grad_norm_(case.model.parameters(), 1.0)
        case.optimizer.step()
        case.optimizer.zero_grad(set_to_none=True)
        return loss.item() * case.grad_accum

    sync = fw.cuda.synchronize if cuda else (lambda: None)
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        last = step()
    sync()
    warmup_s = time.perf_counter() - t0
    loops = []
    for _ in range(args.repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            last = step()
        sync()
        loops.append((time.perf_counter() - t0) / args.steps * 1e3)
    mine = statistics.median(loops)
    per_rank = [mine]
    if ddp is not None and world > 1:
        outs = [fw.zeros(1, device=device) for _ in range(world)]
        dist.all_gather(outs, fw.tensor([mine], device=device))
        per_rank = [float(o.item()) for o in outs]
    if local == 0 and int(os.environ.get("RANK", "0")) == 0:
        cfg = gpt.SIZES[args.size]
        tokens = cfg["batch_size"] * cfg["block_size"] * 2 * world
        row = dict(framework=args.framework, world_size=world, ddp=ddp is not None,
                   step_ms_median=statistics.median(per_rank), step_ms_max=max(per_rank),
                   step_ms_per_rank=per_rank, tokens_per_s=tokens / (max(per_rank) / 1e3),
                   warmup_s=warmup_s, last_loss=last,
                   device=fw.cuda.get_device_name(local) if cuda else "cpu")
        print(f"{args.framework} world_size={world} ddp={'on' if ddp else 'off'}: per-GPU step "
              f"{row['step_ms_median']:.2f} ms (slowest rank {row['step_ms_max']:.2f} ms), "
              f"{row['tokens_per_s']:.0f} tokens/s in all, warmup {warmup_s:.1f} s, "
              f"loss {last:.3f}", flush=True)
        if args.explain and args.framework == "kiln":
            report = json.loads(fw.explain().json())
            for t in report["traces"]:
                print(f"  trace {t['id']}: {len(t['ops'])} ops, {t['kernels']} kernels, "
                      f"{t['replays']} replays {t.get('notes', [])}")
            for b in report["graph_breaks"]:
                print(f"  break x{b['count']}: {b['reason']} at "
                      f"{os.path.basename(b['file'])}:{b['line']}")
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")
    if ddp is not None:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
