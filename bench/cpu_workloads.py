#!/usr/bin/env python3
"""CPU workloads, all systems side by side in one run: kiln eager, kiln traced
(``kiln.compile``), numpy, PyTorch eager, torch.compile (inductor, C++ backend) and
``jax.jit`` on CPU, against the floor (bytes that must move over the copy bandwidth
measured in this run, or flops over the measured matmul rate, whichever is larger).

Method (shared/BENCHMARKS.md): float32, fresh random inputs (the same values for every
system); warm up (kiln traced: past its warmup and compile; torch.compile / jax.jit:
past the first compiled call); check one result per system against a float64 numpy
reference (relative L2 error); then call the function N times in a loop, synchronize,
divide by N (N sized so a loop takes about --target-ms); 7 repeats, the median.

Each system runs in its own worker process (this script with --worker), one after the
other, so that no library's idle thread pool (OpenMP, OpenBLAS and XLA threads spin)
steals the 2 cores from another's timed loop. Compile caches start cold. The worker
also measures how much CPU other processes took during each timed cell (/proc/stat);
busy cells are starred, and --wait-idle waits for a quiet machine first.

    bash bench/setup_cpu_peers.sh      # once: torch 2.x + jax + numpy in one venv
    PYTHONPATH=build-bench/python ~/.cache/kiln-bench-venv/bin/python \\
        bench/cpu_workloads.py --json cpu.json [--quick] [--only softmax,mlp3] \\
        [--systems kiln_traced,torch_compile] [--wait-idle 60]

Prints a markdown table (per-call microseconds; in brackets each system's time over
kiln traced, so >1 means kiln traced is faster; % of floor for kiln traced; kernels
per call from kiln.explain()), then first-call (compile) costs, and writes every
figure to the --json file. A system that does not import is skipped with a note; a
failure in one cell never stops the run.
"""

import argparse
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workload_cases  # noqa: E402

SYSTEMS = ("kiln_eager", "kiln_traced", "numpy", "torch", "torch_compile", "jax")
LABELS = {"kiln_eager": "kiln eager", "kiln_traced": "kiln traced", "numpy": "numpy",
          "torch": "torch eager", "torch_compile": "torch.compile", "jax": "jax.jit",
          "kiln_auto": "kiln auto-trace", "kiln_nojit": "kiln traced KILN_JIT=0"}
WORKER_ENV = {"kiln_nojit": {"KILN_JIT": "0"}}  # extra environment of a system's worker
F32 = 4
BUSY = 0.25  # a cell is starred when other processes used more of the CPUs than this


# ---- the workloads, in two spellings: PyTorch's (torch and kiln, module T) and
# numpy's (numpy and jax.numpy, module N). The float64 numpy run is the reference.

def torch_like(T):
    def add_relu_mul(x, b, s):
        return T.relu(x + b) * s

    def gelu_tanh(x):
        return 0.5 * x * (1.0 + T.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))

    def sin_cos(x, y):
        return T.sin(x) + T.cos(y)

    def softmax(x):
        e = T.exp(x - x.max(dim=-1, keepdim=True)[0])
        return e / e.sum(dim=-1, keepdim=True)

    def layernorm(x, w, b):
        mu = x.mean(dim=-1, keepdim=True)
        var = ((x - mu) * (x - mu)).mean(dim=-1, keepdim=True)
        return (x - mu) / T.sqrt(var + 1e-5) * w + b

    def mlp3(x, w1, b1, w2, b2, w3, b3):
        x = T.relu(x @ w1 + b1)
        x = T.relu(x @ w2 + b2)
        return x @ w3 + b3

    def lstm_cell(x, h, c, wi, wh, b):
        gates = x @ wi + h @ wh + b
        i, f, g, o = gates.chunk(4, dim=1)
        i = T.sigmoid(i); f = T.sigmoid(f); g = T.tanh(g); o = T.sigmoid(o)  # noqa: E702
        c2 = f * c + i * g
        return o * T.tanh(c2), c2

    def attention(q, k, v):
        s = (q @ k.transpose(-2, -1)) / (q.size(-1) ** 0.5)
        return T.softmax(s, dim=-1) @ v

    return locals()


def numpy_like(N, sigmoid, softmax_last):
    def add_relu_mul(x, b, s):
        return N.maximum(x + b, 0) * s

    def gelu_tanh(x):
        return 0.5 * x * (1.0 + N.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))

    def sin_cos(x, y):
        return N.sin(x) + N.cos(y)

    def softmax(x):
        e = N.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def layernorm(x, w, b):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) * (x - mu)).mean(axis=-1, keepdims=True)
        return (x - mu) / N.sqrt(var + 1e-5) * w + b

    def mlp3(x, w1, b1, w2, b2, w3, b3):
        x = N.maximum(x @ w1 + b1, 0)
        x = N.maximum(x @ w2 + b2, 0)
        return x @ w3 + b3

    def lstm_cell(x, h, c, wi, wh, b):
        gates = x @ wi + h @ wh + b
        i, f, g, o = N.split(gates, 4, axis=1)
        i = sigmoid(i); f = sigmoid(f); g = N.tanh(g); o = sigmoid(o)  # noqa: E702
        c2 = f * c + i * g
        return o * N.tanh(c2), c2

    def attention(q, k, v):
        s = (q @ N.swapaxes(k, -2, -1)) / (q.shape[-1] ** 0.5)
        return softmax_last(s) @ v

    return locals()


def np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def cases(quick):
    """(workload, size label, input shapes with scales, flops) for each row (CPU sizes)."""
    return workload_cases.cases(
        quick, pointwise=(1 << 12, 1 << 20) if quick else (1 << 12, 1 << 20, 1 << 24),
        sin_cos_n=1 << (20 if quick else 24),
        attention=(2, 8, 128, 64) if quick else (2, 8, 256, 64))


def make_inputs(shapes, rng):
    out = []
    for s in shapes:
        shape, scale = (s if isinstance(s[0], tuple) else (s, 1.0))
        out.append((rng.standard_normal(shape) * scale).astype(np.float32))
    return out


def as_list(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def rel_l2(got, ref):
    err = 0.0
    for g, r in zip(as_list(got), as_list(ref)):
        g = np.asarray(g, dtype=np.float64)
        if g.shape != r.shape:
            return math.inf
        err = max(err, float(np.linalg.norm(g - r) / (np.linalg.norm(r) + 1e-30)))
    return err


# ---- the systems, each measured in its own worker process (so that one library's
# spinning thread pool, OpenMP's or OpenBLAS's or XLA's, never steals the 2 cores from
# another's timed loop). Each gives convert(np array), prepare(fn), sync(out),
# to_numpy(out); copy() and matmul() for the floor where it has them.

class System:
    explain = None
    copy = matmul = None

    def prepare(self, name, fn):
        """The callable to time (may wrap fn, this system's spelling of the workload)."""
        return fn

    def sync(self, out):
        pass

    def to_numpy(self, out):
        return [np.asarray(o) for o in as_list(out)]


class Numpy(System):
    def __init__(self):
        self.fns = numpy_like(np, np_sigmoid, np_softmax)
        self.version = np.__version__

    def convert(self, a):
        return a.copy()

    def copy(self, src):
        dst = np.empty_like(src)
        return lambda: np.copyto(dst, src)

    def matmul(self, a):
        return lambda: a @ a


class Torch(System):
    def __init__(self, compiled):
        import torch

        self.torch, self.compiled = torch, compiled
        if compiled and not hasattr(torch, "compile"):
            raise ImportError(f"torch {torch.__version__} has no torch.compile")
        self.fns = torch_like(torch)
        self.version = f"{torch.__version__} ({torch.get_num_threads()} threads)"
        if not compiled:
            self.copy, self.matmul = self._copy, self._matmul

    def convert(self, a):
        return self.torch.from_numpy(a.copy())

    def prepare(self, name, fn):
        if not self.compiled:
            return fn
        self.torch._dynamo.reset()
        return self.torch.compile(fn, dynamic=False)

    def to_numpy(self, out):
        return [o.numpy() for o in as_list(out)]

    def _copy(self, src):
        s, d = self.convert(src), self.torch.empty(src.shape)
        return lambda: d.copy_(s)

    def _matmul(self, a):
        t = self.convert(a)
        return lambda: t @ t


class Jax(System):
    def __init__(self):
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        self.fns = numpy_like(jnp, jax.nn.sigmoid, lambda s: jax.nn.softmax(s, axis=-1))
        self.version = f"{jax.__version__} ({jax.devices()[0].platform})"

    def convert(self, a):
        return self.jnp.asarray(a)

    def prepare(self, name, fn):
        return self.jax.jit(fn)

    def sync(self, out):
        self.jax.block_until_ready(out)


class Kiln(System):
    """mode: 'eager' (tracing off), 'traced' (kiln.compile(fn): a region, compiled after
    KILN_WARMUP calls, replayed from then on), 'auto' (tracing on, the plain function
    called in a loop)."""

    def __init__(self, mode):
        import kiln

        self.kiln, self.mode = kiln, mode
        self.fns = torch_like(kiln)
        self.version = f"{kiln.__version__} ({kiln.get_num_threads()} threads)"
        kiln.set_tracing(mode == "auto")

    def convert(self, a):
        return self.kiln.tensor(a)

    def prepare(self, name, fn):
        self.kiln.reset()  # explain() then reports this workload only
        return self.kiln.compile(fn, name=name) if self.mode == "traced" else fn

    def sync(self, out):
        for o in as_list(out):  # a memory read runs any pending (lazy) work
            o.data_ptr()

    def to_numpy(self, out):
        return [o.numpy() for o in as_list(out)]

    def copy(self, src):
        s, d = self.convert(src), self.kiln.empty(*src.shape)
        return lambda: d.copy_(s)

    def matmul(self, a):
        t = self.convert(a)
        return lambda: t @ t

    def explain(self):
        e = self.kiln.explain()
        hot = [t for t in e.traces if t["replays"] > 0]
        return dict(kernels=sum(t["kernels"] for t in hot), traces=len(hot),
                    ops=sum(len(t["ops"]) for t in hot),
                    backends=sorted({t["backend"] for t in hot}),
                    graph_breaks=len(e.graph_breaks), compile_ms=e.compile_ms,
                    jit_notes=[n for t in hot for n in t.get("notes", [])],
                    # never slower than eager: each trace's eager median / replay median
                    # (tracer/speed_check.h), and the traces left eager as slower
                    replay_speedup=[round(t["eager_median_ms"] / t["replay_median_ms"], 2)
                                    for t in hot if t.get("replay_median_ms")],
                    slower_than_eager=[t["eager_reason"] for t in e.traces
                                       if t.get("eager_reason")])


MAKERS = {"numpy": Numpy, "torch": lambda: Torch(False), "torch_compile": lambda: Torch(True),
          "jax": Jax, "kiln_eager": lambda: Kiln("eager"), "kiln_traced": lambda: Kiln("traced"),
          "kiln_auto": lambda: Kiln("auto"), "kiln_nojit": lambda: Kiln("traced")}


# ---- timing (in the worker)

def cpu_snapshot():
    """(wall s, busy jiffies of the whole machine, this process's jiffies), or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]  # user .. steal
        with open("/proc/self/stat") as f:
            mine = f.read().rsplit(")", 1)[1].split()
        return time.perf_counter(), sum(v) - v[3] - v[4], int(mine[11]) + int(mine[12])
    except (OSError, ValueError, IndexError):
        return None


def background(before, after):
    """Share of all CPUs that other processes used between two snapshots."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    hz, cpus = os.sysconf("SC_CLK_TCK"), os.cpu_count() or 1
    other = (after[1] - before[1]) - (after[2] - before[2])
    return round(max(0.0, other / ((after[0] - before[0]) * hz * cpus)), 3)


def wait_for_quiet(max_s, threshold=0.15):
    """Waits (at most max_s) until other processes use under threshold of the CPUs."""
    deadline = time.perf_counter() + max_s
    while time.perf_counter() < deadline:
        a = cpu_snapshot()
        time.sleep(0.5)
        busy = background(a, cpu_snapshot())
        if busy is None or busy < threshold:
            return

def time_loop(call, sync, target_s, repeats):
    """Median per-call seconds of `repeats` loops of N calls (N fills target_s)."""
    calls = 1
    while True:  # calibrate, like timeit's autorange
        t0 = time.perf_counter()
        for _ in range(calls):
            out = call()
        sync(out)
        elapsed = time.perf_counter() - t0
        if elapsed >= target_s / 5 or calls >= 100000:
            break
        calls *= 10 if elapsed < target_s / 50 else 2
    calls = max(1, min(100000, round(calls * target_s / elapsed)))
    del out
    per_call = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                out = call()
            sync(out)
            per_call.append((time.perf_counter() - t0) / calls)
    finally:
        gc.enable()
    return statistics.median(per_call), calls, min(per_call)


def measure(call, sync, args):
    """time_loop on a quiet machine if it can be had: waits up to --wait-idle, and
    measures again (--retries) when other processes took over BUSY of the CPUs, keeping
    the quietest attempt. Returns a dict: us, min_us, calls, background, attempts."""
    best = None
    for attempt in range(1 + args.retries):
        wait_for_quiet(args.wait_idle)
        before = cpu_snapshot()
        t, calls, fastest = time_loop(call, sync, args.target_ms / 1e3, args.repeats)
        bg = background(before, cpu_snapshot())
        if best is None or (bg or 0) < (best["background"] or 0):
            best = dict(us=round(t * 1e6, 3), min_us=round(fastest * 1e6, 3), calls=calls,
                        background=bg)
        best["attempts"] = attempt + 1
        if (bg or 0) <= BUSY:
            break
    return best


def measure_limits(sys_, args):
    """Copy bandwidth (2^24 floats into a preallocated array; bytes read + written per
    second) and float32 matmul rate (1024^3), where this system has them."""
    rng = np.random.default_rng(1)
    vector = rng.standard_normal(1 << 24).astype(np.float32)
    matrix = rng.standard_normal((1024, 1024)).astype(np.float32)
    out = {}
    for key, make, arg, work in (("copy_GBps", sys_.copy, vector, 2 * vector.nbytes),
                                 ("matmul_GFLOPs", sys_.matmul, matrix, 2 * 1024 ** 3)):
        if make is None:
            continue
        try:
            call = make(arg)
            for _ in range(3):
                sys_.sync(call())
            out[key] = round(work / measure(call, sys_.sync, args)["us"] / 1e3, 2)
        except Exception as e:
            print(f"  [{key} not measured: {type(e).__name__}: {e}]", file=sys.stderr)
    return out


def run_case(index, case, sys_, args):
    name, size, shapes, flops = case
    inputs = make_inputs(shapes, np.random.default_rng(index))  # same values in every worker
    ref = [np.asarray(r) for r in as_list(numpy_like(np, np_sigmoid, np_softmax)[name](
        *[x.astype(np.float64) for x in inputs]))]
    res = dict(workload=name, size=size, flops=flops,
               bytes=sum(x.nbytes for x in inputs) + sum(r.size * F32 for r in ref))
    try:
        xs = [sys_.convert(x) for x in inputs]
        fn = sys_.prepare(name, sys_.fns[name])
        call = lambda: fn(*xs)  # noqa: E731
        t0 = time.perf_counter()
        sys_.sync(call())
        res["first_call_s"] = round(time.perf_counter() - t0, 4)
        for _ in range(args.warmup):  # kiln traced compiles after KILN_WARMUP calls
            sys_.sync(call())
        out = call()  # a replayed / compiled result, checked before timing
        sys_.sync(out)
        res["rel_err"] = rel_l2(sys_.to_numpy(out), ref)
        del out
        if not res["rel_err"] <= args.tol:
            res["error"] = f"wrong result: rel L2 error {res['rel_err']:.2e}"
            return res
        res.update(measure(call, sys_.sync, args))
        if sys_.explain is not None:
            res.update(sys_.explain())
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return res


def worker(args):
    """Measures one system (args.worker); writes its JSON to args.worker_out."""
    try:
        sys_ = MAKERS[args.worker]()
    except Exception as e:  # ImportError, a broken install, ...
        result = dict(skipped=f"{type(e).__name__}: {e}".splitlines()[0][:200])
    else:
        result = dict(version=sys_.version, limits=measure_limits(sys_, args), rows=[])
        for index, case in enumerate(cases(args.quick)):
            if args.only and case[0] not in args.only.split(","):
                continue
            t0 = time.perf_counter()
            result["rows"].append(run_case(index, case, sys_, args))
            took = time.perf_counter() - t0
            print(f"  [{LABELS[args.worker]}: {case[0]} {case[1]}, {took:.1f} s]", file=sys.stderr,
                  flush=True)
    with open(args.worker_out, "w") as f:
        json.dump(result, f)


# ---- report (in the main process)

def fmt_us(us):
    return f"{us:.3g}" if us < 100 else f"{us:,.0f}"


def busy(res):
    return "*" if (res.get("background") or 0) > BUSY else ""


def table(rows, names):
    base = "kiln_traced" if "kiln_traced" in names else names[0]
    others = [n for n in names if n != base]
    head = ["workload", "size", "floor us", f"{LABELS[base]} us"]
    if base.startswith("kiln"):
        head += ["% floor", "kernels"]
    head += [LABELS[n] for n in others]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes = []
    for r in rows:
        b = r["results"].get(base, {})
        cells = [r["workload"], r["size"], fmt_us(r["floor_us"])]
        cells.append(fmt_us(b["us"]) + busy(b) if "us" in b else "n/a")
        if base.startswith("kiln"):
            cells.append(f"{100 * r['floor_us'] / b['us']:.0f}%" if "us" in b else "")
            cells.append(str(b.get("kernels", "")))
        for n in others:
            s = r["results"].get(n, {})
            if "us" in s and "us" in b:
                cells.append(f"{fmt_us(s['us'])}{busy(s)} ({s['us'] / b['us']:.2f}x)")
            else:
                cells.append(fmt_us(s["us"]) + busy(s) if "us" in s else "n/a")
        for n in names:
            res, where = r["results"].get(n, {}), f"{r['workload']} {r['size']}, {LABELS[n]}"
            if "error" in res:
                notes.append(f"{where}: {res['error']}")
            if n in ("kiln_traced", "kiln_auto", "kiln_nojit") and res.get("traces") == 0:
                notes.append(f"{where}: no compiled trace replayed (ran eagerly)")
            if n in ("kiln_traced", "kiln_auto", "kiln_nojit") and res.get("graph_breaks"):
                notes.append(f"{where}: {res['graph_breaks']} graph break site(s)")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), notes


def compile_table(rows, names):
    """First-call (compile) cost: kiln traced's compile_ms from explain(), the first call
    of torch.compile (cold inductor cache) and jax.jit, in ms."""
    cols = [n for n in ("kiln_traced", "torch_compile", "jax") if n in names]
    if not cols:
        return ""
    head = ["workload", "size"] + [("kiln traced compile ms" if n == "kiln_traced" else
                                     f"{LABELS[n]} first call ms") for n in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["workload"], r["size"]]
        for n in cols:
            res = r["results"][n]
            v = res.get("compile_ms") if n == "kiln_traced" else (
                res["first_call_s"] * 1e3 if "first_call_s" in res else None)
            cells.append("n/a" if v is None else f"{v:.3g}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes, 3 repeats, short loops")
    p.add_argument("--only", default="", help="comma list of workloads (add_relu_mul, gelu_tanh, "
                   "sin_cos, softmax, layernorm, mlp3, lstm_cell, attention)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma list of {', '.join(SYSTEMS)}; also kiln_auto (automatic "
                   "tracing of the plain function), kiln_nojit (kiln.compile with KILN_JIT=0)")
    p.add_argument("--json", default="", help="write every figure to this file")
    p.add_argument("--repeats", type=int, default=None, help="timed loops per cell (default 7)")
    p.add_argument("--target-ms", type=float, default=None, help="length of one timed loop")
    p.add_argument("--warmup", type=int, default=5, help="calls before the checked call")
    p.add_argument("--tol", type=float, default=1e-4, help="max relative L2 error")
    p.add_argument("--wait-idle", type=float, default=0.0, metavar="S", help="before each timed "
                   "cell, wait up to S seconds for other processes to leave the CPUs")
    p.add_argument("--retries", type=int, default=None, help="times a cell is measured again "
                   f"when other processes took over {BUSY * 100:.0f}%% of the CPUs (default 2; quick 0)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.repeats = args.repeats or (3 if args.quick else 7)
    args.target_ms = args.target_ms or (30.0 if args.quick else 200.0)
    if args.retries is None:
        args.retries = 0 if args.quick else 2
    if args.worker:
        return worker(args)
    names = [s for s in args.systems.split(",") if s]
    bad = [s for s in names if s not in MAKERS]
    if bad:
        p.error(f"unknown systems {bad}")
    known = {c[0] for c in cases(False)}
    if {w for w in args.only.split(",") if w} - known:
        p.error(f"--only takes workloads among {sorted(known)}")

    start, load0 = time.perf_counter(), os.getloadavg()
    passthrough = [f"--repeats={args.repeats}", f"--target-ms={args.target_ms}",
                   f"--warmup={args.warmup}", f"--tol={args.tol}", f"--only={args.only}",
                   f"--wait-idle={args.wait_idle}", f"--retries={args.retries}"]
    passthrough += ["--quick"] if args.quick else []
    results, notes = {}, []
    for name in names:
        with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
            out = os.path.join(tmp, "worker.json")
            env = dict(os.environ, **WORKER_ENV.get(name, {}))
            # cold compile caches (inductor's, kiln's kernel cache) unless the caller names them
            env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tmp, "inductor"))
            env.setdefault("KILN_CACHE_DIR", os.path.join(tmp, "kiln"))
            rc = subprocess.call([sys.executable, os.path.abspath(__file__), "--worker", name,
                                  "--worker-out", out] + passthrough, env=env)
            try:
                with open(out) as f:
                    res = json.load(f)
            except (OSError, ValueError):
                res = dict(skipped=f"worker exited with status {rc} and no result")
        if "skipped" in res:
            notes.append(f"{LABELS[name]} skipped: {res['skipped']}")
        else:
            results[name] = res
    names = [n for n in names if n in results]
    if not names:
        sys.exit("no system could be measured: " + "; ".join(notes))

    limits = {key: {n: r["limits"][key] for n, r in results.items() if key in r["limits"]}
              for key in ("copy_GBps", "matmul_GFLOPs")}
    bw = max(limits["copy_GBps"].values(), default=math.inf) * 1e9  # none measured: no floor
    rate = max(limits["matmul_GFLOPs"].values(), default=math.inf) * 1e9
    rows = []
    for i, r0 in enumerate(results[names[0]]["rows"]):
        floor = max(r0["bytes"] / bw, r0["flops"] / rate) * 1e6
        rows.append(dict(workload=r0["workload"], size=r0["size"], bytes=r0["bytes"],
                         flops=r0["flops"], floor_us=round(floor, 3),
                         results={n: results[n]["rows"][i] for n in names}))
    env = dict(python=sys.version.split()[0], machine=platform.machine(), cpus=os.cpu_count(),
               versions={n: r["version"] for n, r in results.items()},
               loadavg_start=load0, loadavg_end=os.getloadavg())
    elapsed = time.perf_counter() - start

    print(f"\n# kiln CPU workloads ({'quick' if args.quick else 'full'} run, "
          f"{os.cpu_count()} cpus, python {env['python']}, each system in its own process)\n")
    for n in names:
        print(f"- {LABELS[n]}: {env['versions'][n]}")
    for n in notes:
        print(f"- {n}")
    print(f"- copy bandwidth GB/s (2^24 floats, read+write): {limits['copy_GBps']}; "
          f"float32 matmul GFLOP/s (1024^3): {limits['matmul_GFLOPs']}; the floor uses the best\n")
    text, cell_notes = table(rows, names)
    print(text)
    base = LABELS["kiln_traced" if "kiln_traced" in names else names[0]]
    print(f"\nus per call, median of {args.repeats}; (Nx) = that system's time / {base} "
          f"(>1: {base} is faster). floor = max(bytes in+out / best copy bandwidth, "
          "flops / best matmul rate), so sizes that fit in cache can beat it (>100%); "
          f"% floor = floor / {base}. kernels: per call, from kiln.explain() (BLAS calls count). "
          "attention runs at a CPU size (not 16x8x1024x64). "
          f"*: other processes used over {BUSY:.0%} of the CPUs during that cell's timed loops.")
    for n in cell_notes:
        print(f"- {n}")
    ctable = compile_table(rows, names)
    if ctable:
        print("\n" + ctable)
    print(f"\ntotal {elapsed:.0f} s; load average (1 min) at start {load0[0]:.2f}, at end "
          f"{env['loadavg_end'][0]:.2f} (other work on the 2 cores skews the figures)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(env=env, limits=limits, notes=notes, quick=args.quick,
                           repeats=args.repeats, target_ms=args.target_ms,
                           elapsed_s=round(elapsed, 1), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
