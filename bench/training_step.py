#!/usr/bin/env python3
"""Time per training step, all systems side by side in one run: kiln eager (tracing off),
kiln traced (the default: after warmup the whole step -- forward, backward, Adam -- is
one compiled trace), PyTorch eager and torch.compile (the model compiled; backward
through AOTAutograd; the optimizer eager, as most users run it).

Models (identical code for both frameworks, identical initial weights and data):
  mlp3         the seed MLP of BENCHMARKS.md: 1 -> 1024 -> 1024 -> 1, ReLU, MSE loss,
               batch 128 and 4096
  transformer  one pre-LN block: d 256, 4 heads, tokens 64, batch 16, MLP 4x with GELU,
               MSE loss on the block's output
The step is the usual loop body: zero_grad(set_to_none), loss = f(model(x), y),
backward, Adam step, loss.item() (a host read every step, as logging does). Per-step
time = N steps in a loop / N, median of --repeats loops, after --warmup steps. Every
system's loss after the warmup is printed: the systems compute the same thing.

kiln's module is built for Python 3.11, PyTorch may live in another interpreter, so
each system runs in a worker process (this script with --worker) under --kiln-python /
--torch-python. On the GPU machine scripts/gpu_run.sh runs it (KILN_GPU_STEPS=train).

    python3 bench/training_step.py --device cpu
    python3 bench/training_step.py --device cuda --kiln-python /tmp/kilndeb/kiln-python3.11
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

SYSTEMS = ("kiln_eager", "kiln_traced", "torch_eager", "torch_compile")
CASES = (("mlp3", 128), ("mlp3", 4096), ("transformer", 16))


# ---- the models, written once against a torch-like module (torch or kiln)

def build_model(fw, name):
    nn, F = fw.nn, fw.nn.functional
    if name == "mlp3":
        return nn.Sequential(nn.Linear(1, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                             nn.Linear(1024, 1))

    class Block(nn.Module):
        def __init__(self, d=256, heads=4):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            h = self.heads
            q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
            q = q.reshape(b, t, h, d // h).transpose(1, 2)
            k = k.reshape(b, t, h, d // h).transpose(1, 2)
            v = v.reshape(b, t, h, d // h).transpose(1, 2)
            att = F.softmax((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h)), -1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(y)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    return Block()


def make_data(np, name, batch):
    rng = np.random.default_rng(1234)
    if name == "mlp3":
        x = rng.uniform(-2, 2, (batch, 1)).astype(np.float32)
        return x, np.sin(3 * x).astype(np.float32)
    x = rng.standard_normal((batch, 64, 256)).astype(np.float32)
    return x, rng.standard_normal((batch, 64, 256)).astype(np.float32) * 0.5


def initial_weights(np, model):
    """Deterministic weights by parameter order and shape (the same in both frameworks)."""
    rng = np.random.default_rng(42)
    out = {}
    for key, p in model.state_dict().items():
        shape = tuple(p.shape)
        fan_in = shape[1] if len(shape) > 1 else max(shape[0], 1)
        if key.endswith("weight") and len(shape) == 1:  # LayerNorm
            out[key] = np.ones(shape, np.float32)
        else:
            out[key] = (rng.uniform(-1, 1, shape) / math.sqrt(fan_in)).astype(np.float32)
    return out


# ---- a worker: one system, every case

def worker(args):
    import numpy as np

    system = args.worker
    if system.startswith("kiln"):
        import kiln as fw

        fw.set_tracing(system == "kiln_traced")
        to_dev = (lambda a: fw.from_numpy(a).to(args.device))
        sync = (lambda: None)
    else:
        import torch as fw

        torch = fw
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        to_dev = (lambda a: torch.from_numpy(a).to(args.device))
        sync = (torch.cuda.synchronize if args.device == "cuda" else (lambda: None))
    for name, batch in CASES:
        if args.only and name not in args.only.split(","):
            continue
        if args.quick and batch == 4096:
            continue
        res = dict(system=system, case=f"{name} b{batch}")
        try:
            model = build_model(fw, name)
            weights = initial_weights(np, model)
            if not system.startswith("kiln"):
                weights = {k: fw.from_numpy(v) for k, v in weights.items()}
            model.load_state_dict(weights)
            model = model.to(args.device)
            x, y = (to_dev(a) for a in make_data(np, name, batch))
            opt = (fw.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
                   if args.optimizer == "sgd" else fw.optim.Adam(model.parameters(), lr=1e-4))
            forward = torch.compile(model) if system == "torch_compile" else model
            mse = fw.nn.functional.mse_loss

            def step():
                opt.zero_grad(set_to_none=True)
                loss = mse(forward(x), y)
                loss.backward()
                opt.step()
                return loss.item()

            t0 = time.perf_counter()
            first = step()
            res["first_step_ms"] = (time.perf_counter() - t0) * 1e3
            for _ in range(args.warmup - 1):
                loss = step()
            res["loss_after_warmup"] = loss
            res["first_loss"] = first
            sync()
            times = []
            n = args.steps
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                for _ in range(n):
                    step()
                sync()
                times.append((time.perf_counter() - t0) / n)
            res["us"] = statistics.median(times) * 1e6
            if system == "kiln_traced":
                e = fw.explain()
                res["traces"] = [dict(ops=len(t["ops"]), kernels=t["kernels"],
                                      replays=t["replays"]) for t in e.traces if t["replays"] > 0]
        except Exception as e:  # a system that fails gets the error in its cell
            res["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        print("RESULT " + json.dumps(res), flush=True)


# ---- the driver

def run_worker(python, system, args):
    cmd = python.split() + [os.path.abspath(__file__), "--worker", system, "--device",
                            args.device, "--warmup", str(args.warmup), "--steps",
                            str(args.steps), "--repeats", str(args.repeats), "--optimizer",
                            args.optimizer]
    if args.quick:
        cmd.append("--quick")
    if args.only:
        cmd += ["--only", args.only]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        out, err = p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out, err = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), \
            "timeout"
    results = [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
    if not results:
        print(f"[{system}] produced no results: {err.strip().splitlines()[-1:]}", file=sys.stderr)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--kiln-python", default=os.environ.get("KILN_PYTHON", sys.executable))
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--quick", action="store_true", help="skip batch 4096")
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--optimizer", default="adam", choices=("adam", "sgd"))
    ap.add_argument("--json", default="")
    ap.add_argument("--worker", default="")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    rows = {}
    for system in args.systems.split(","):
        python = args.kiln_python if system.startswith("kiln") else args.torch_python
        for r in run_worker(python, system, args):
            rows.setdefault(r["case"], {})[system] = r
    names = args.systems.split(",")
    print(f"training step ({args.optimizer}), device {args.device}: per-step us (median of {args.repeats} x "
          f"{args.steps} steps after {args.warmup} warmup); (x) = time / kiln traced")
    print(f"{'case':18s}" + "".join(f"{n:>22s}" for n in names))
    for case, by in rows.items():
        base = by.get("kiln_traced", {}).get("us")
        cells = []
        for n in names:
            r = by.get(n, {})
            if "us" in r:
                ratio = f" ({r['us'] / base:.2f})" if base and n != "kiln_traced" else ""
                cells.append(f"{r['us']:,.0f}{ratio}")
            else:
                cells.append(r.get("error", "-")[:20])
        print(f"{case:18s}" + "".join(f"{c:>22s}" for c in cells))
    print("loss after warmup (same model, weights and data in every system):")
    for case, by in rows.items():
        print(f"  {case:16s} " + "  ".join(
            f"{n}={by[n]['loss_after_warmup']:.6g}" for n in names if "loss_after_warmup" in by.get(n, {})))
    print("first step (ms): " + "; ".join(
        f"{case}: " + ", ".join(f"{n} {by[n]['first_step_ms']:.0f}" for n in names
                                if "first_step_ms" in by.get(n, {})) for case, by in rows.items()))
    for case, by in rows.items():
        tr = by.get("kiln_traced", {}).get("traces")
        if tr is not None:
            print(f"kiln traced {case}: replayed traces " +
                  ", ".join(f"{t['ops']} ops / {t['kernels']} kernels x{t['replays']}" for t in tr))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
