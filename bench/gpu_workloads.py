#!/usr/bin/env python3
"""GPU workloads, all systems side by side in one run: kiln eager (tracing off), kiln
traced (``kiln.compile``: warmup, CUDA JIT, graph replay), PyTorch eager,
``torch.compile`` (inductor) and ``torch.compile(mode="reduce-overhead")``, against the
floor (bytes over the device-to-device copy bandwidth measured in this run, flops over
the measured matmul rate, or one CUDA graph launch, whichever is larger).

Method (shared/BENCHMARKS.md, as the anchors in shared/reference/torch_workloads.py):
float32, TF32 off; the same random inputs for every system; a float64 eager reference
(PyTorch on the device, else numpy); each system's result is checked against it
(relative L2 error, --tol) after its warmup and before timing; per-call time = N calls
in a loop, synchronize, divide by N (N sized so a loop takes about --target-ms); 7
repeats, the median. The workload functions are bench/cpu_workloads.py's, run on CUDA
tensors.

kiln's Python module is built for Debian's Python 3.11 while PyTorch lives in the
machine's python3, so each system runs in its own worker process (this script with
--worker), kiln's under --kiln-python (a command that imports kiln; env KILN_PYTHON,
default this interpreter), PyTorch's under --torch-python (default this interpreter).
A worker that dies is restarted after the workload it died in; a system that fails on a
workload gets "error: <first line>" in that cell and the run goes on.

    python3 bench/gpu_workloads.py --kiln-python /tmp/kilndeb/kiln-python3.11 --json w.json
    python3 bench/gpu_workloads.py --quick --only softmax,mlp3 --systems kiln_traced,torch_compile
    python3 bench/gpu_workloads.py --dry-run      # what would run; says so if no GPU is seen

On the lent GPU machine scripts/gpu_run.sh runs it (the interpreter wrapper is made
there). First calls: kiln traced cold (an empty KILN_CACHE_DIR, a fresh temp dir) and
warm (a new process with that cache filled), and torch.compile's first call (cold
inductor and Triton caches unless TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR are set).
"""

import argparse
import collections
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workload_cases  # noqa: E402  (numpy-free)
try:  # the workers need numpy and cpu_workloads' workload functions; the main process not
    import numpy as np
    import cpu_workloads as cw  # the workload functions, inputs, the timed loop
except ImportError as e:
    np = cw = None
    WORKER_IMPORT_ERROR = f"{type(e).__name__}: {e}"

SYSTEMS = ("kiln_eager", "kiln_traced", "torch_eager", "torch_compile", "torch_compile_ro")
LABELS = {"kiln_eager": "kiln eager", "kiln_traced": "kiln traced", "kiln_warm": "kiln warm cache",
          "torch_eager": "torch eager", "torch_compile": "torch.compile",
          "torch_compile_ro": "torch.compile ro"}
F32 = 4
FIRST_CALLS = 8  # synchronized calls timed one by one (kiln traced compiles after 2, by default)


# ---- the workloads (BENCHMARKS.md's GPU sizes; the functions are cpu_workloads.py's)

def size_label(n):
    return str(n) if n < 1 << 16 else f"2^{n.bit_length() - 1}"


def cases(quick):
    """(workload, size label, input shapes with scales, flops) for each row (GPU sizes)."""
    return workload_cases.cases(
        quick, pointwise=(1 << 12, 1 << 20) if quick else (1 << 12, 1 << 20, 1 << 26),
        sin_cos_n=1 << (20 if quick else 24),
        attention=(2, 8, 256, 64) if quick else (16, 8, 1024, 64), label=size_label)


def rel_l2(got, refs):
    """Largest relative L2 error of the outputs (float64 on the host); inf on a shape
    or count mismatch, nan if any output holds one."""
    if len(got) != len(refs):
        return math.inf
    worst = 0.0
    for g, r in zip(got, refs):
        if tuple(g.shape) != tuple(r.shape):
            return math.inf
        d = np.array(g, dtype=np.float64).ravel()  # a copy: changed in place below
        r64 = np.asarray(r, dtype=np.float64).ravel()
        d -= r64
        e = math.sqrt(float(np.dot(d, d))) / (math.sqrt(float(np.dot(r64, r64))) + 1e-30)
        if math.isnan(e):
            return math.nan
        worst = max(worst, e)
    return worst


def first_line(text, limit=200):
    lines = [s.strip() for s in str(text).strip().splitlines() if s.strip()]
    return (lines[0] if lines else "")[:limit]


def error_text(e):
    return first_line(f"{type(e).__name__}: {e}")


# ---- the systems (in the worker). Each wraps cpu_workloads' system for a device.

class KilnGpu(cw.Kiln if cw else object):
    """mode 'eager': tracing off, plain eager dispatch; 'traced': kiln.compile(fn)."""

    def __init__(self, mode, device):
        super().__init__(mode)  # cw.Kiln: kiln.set_tracing(False) for both modes
        kiln = self.kiln
        self.device = device
        if device == "cuda":
            if not kiln.cuda.is_available():
                raise RuntimeError(f"kiln sees no CUDA device (kiln.cuda.is_built() = "
                                   f"{kiln.cuda.is_built()})")
            self.device_name = kiln.cuda.get_device_name(0)
        else:
            self.device_name = platform.processor() or "cpu"
        self.version = (f"kiln {kiln.__version__}, python {platform.python_version()}, "
                        f"{self.device_name}")

    def convert(self, a):
        return self.kiln.tensor(a, device=self.device)

    def sync(self, out):
        super().sync(out)  # a memory read runs any pending (lazily replayed) work
        if self.device == "cuda":
            self.kiln.cuda.synchronize()

    def to_numpy(self, out):
        return [o.cpu().numpy() for o in cw.as_list(out)]

    def copy(self, src):
        s, d = self.convert(src), self.kiln.empty(*src.shape, device=self.device)
        return lambda: d.copy_(s)

    def tiny_op(self):
        x = self.kiln.zeros(1, device=self.device)
        return lambda: x.add_(1.0)

    def compiled_traces(self):
        return len(self.kiln.explain().traces)

    def start_compiler(self):
        """Compiles a small function unlike any workload, so that the process's one-time
        start (JIT libraries, modules) is not charged to the first workload."""
        if self.mode != "traced":
            return None
        kiln = self.kiln
        f = kiln.compile(lambda x: kiln.abs(x - 1.0) * 3.0, name="start")
        x = kiln.zeros(8, device=self.device)
        t0 = time.perf_counter()
        for _ in range(4):
            self.sync(f(x))
        kiln.reset()
        return time.perf_counter() - t0

    def release(self):
        if self.device == "cuda":
            self.kiln.cuda.empty_cache()


class TorchGpu(cw.Torch if cw else object):
    """mode: 'eager', 'default' (torch.compile) or 'reduce-overhead'."""

    def __init__(self, mode, device):
        super().__init__(mode != "eager")
        torch = self.torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self.mode, self.device = mode, device
        if device == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("torch sees no CUDA device")
            self.device_name = torch.cuda.get_device_name(0)
        else:
            self.device_name = platform.processor() or "cpu"
        self.version = (f"torch {torch.__version__}, python {platform.python_version()}, "
                        f"{self.device_name}")
        # cw.Torch binds its host copy/matmul to the instance: these run on the device
        self.copy, self.matmul = self.device_copy, self.device_matmul

    def convert(self, a):  # a copy on the CPU too: inputs never share the loaded arrays
        return self.torch.from_numpy(a).to(self.device, copy=True)

    def prepare(self, name, fn):
        if self.mode == "eager":
            return fn
        self.torch._dynamo.reset()
        return self.torch.compile(fn, mode=None if self.mode == "default" else self.mode,
                                  dynamic=False)

    def sync(self, out):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def to_numpy(self, out):
        return [o.detach().cpu().numpy() for o in cw.as_list(out)]

    def device_copy(self, src):
        s = self.convert(src)
        d = self.torch.empty_like(s)
        return lambda: d.copy_(s)

    def device_matmul(self, a):
        t = self.convert(a)
        return lambda: t @ t

    def tiny_op(self):
        x = self.torch.zeros(1, device=self.device)
        return lambda: x.add_(1.0)

    def start_compiler(self):
        """As KilnGpu.start_compiler: the first torch.compile of the process imports and
        starts inductor (and its compile workers), paid here rather than by a workload."""
        if self.mode == "eager":
            return None
        torch = self.torch
        f = self.prepare("start", lambda x: torch.abs(x - 1.0) * 3.0)
        x = torch.zeros(8, device=self.device)
        t0 = time.perf_counter()
        for _ in range(4):
            self.sync(f(x))
        torch._dynamo.reset()
        return time.perf_counter() - t0

    def graph_launch(self):
        """Replay of a CUDA graph holding one tiny kernel (the launch floor)."""
        torch = self.torch
        if self.device != "cuda":
            return None
        x = torch.zeros(1, device="cuda")
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                x.add_(1.0)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            x.add_(1.0)
        return graph.replay

    def release(self):
        if self.device == "cuda":
            self.torch.cuda.empty_cache()


MAKERS = {"kiln_eager": lambda d: KilnGpu("eager", d),
          "kiln_traced": lambda d: KilnGpu("traced", d),
          "kiln_warm": lambda d: KilnGpu("traced", d),  # first calls only, from the filled cache
          "torch_eager": lambda d: TorchGpu("eager", d),
          "torch_compile": lambda d: TorchGpu("default", d),
          "torch_compile_ro": lambda d: TorchGpu("reduce-overhead", d)}
LIMITS_FROM = ("kiln_eager", "torch_eager")  # the workers that measure the device's limits


# ---- the worker

def measure_limits(sys_, args):
    """Device-to-device copy bandwidth (bytes read + written per second), float32
    matmul rate (TF32 off), a tiny eager op and (torch) a one-kernel graph replay."""
    cuda = args.device == "cuda"
    rng = np.random.default_rng(1)
    n = 1 << (28 if cuda and not args.quick else 24)
    m = 4096 if cuda else 1024
    out = {}
    jobs = [("copy_GBps", lambda: sys_.copy(np.full(n, 1.5, dtype=np.float32)),
             lambda t: 2 * n * F32 / t / 1e9),
            ("matmul_GFLOPs", lambda: sys_.matmul(rng.standard_normal((m, m), dtype=np.float32)),
             lambda t: 2 * m ** 3 / t / 1e9),
            ("tiny_op_us", sys_.tiny_op, lambda t: t * 1e6)]
    if hasattr(sys_, "graph_launch"):
        jobs.append(("graph_launch_us", sys_.graph_launch, lambda t: t * 1e6))
    for key, make, value in jobs:
        try:
            call = make()
            if call is None:
                continue
            for _ in range(3):
                sys_.sync(call())
            t, _, _ = cw.time_loop(call, sys_.sync, args.target_ms / 1e3, args.repeats)
            out[key] = round(value(t), 3)
            del call
        except Exception as e:
            print(f"  [{key} not measured: {error_text(e)}]", file=sys.stderr, flush=True)
    sys_.release()
    return out


def load_row(args, row):
    inputs = [np.load(os.path.join(args.data, f)) for f in row["inputs"]]
    refs = [np.load(os.path.join(args.data, f)) for f in row["refs"]]
    return inputs, refs


def run_case(row, sys_, args, timed=True):
    """One workload on one system: first calls, warmup, the check, the timed loops.
    Returns a dict of figures, with "error" when something failed."""
    res = {}
    try:
        measure_case(row, sys_, args, timed, res)
    except Exception as e:
        res["error"] = error_text(e)
    sys_.release()  # the case's tensors are gone with measure_case's frame
    return res


def measure_case(row, sys_, args, timed, res):
    """run_case's body; fills res."""
    name = row["workload"]
    inputs, refs = load_row(args, row)
    xs = [sys_.convert(x) for x in inputs]
    del inputs
    sys_.sync(xs)
    fn = sys_.prepare(name, sys_.fns[name])
    call = lambda: fn(*xs)  # noqa: E731
    # First calls, each synchronized and timed: the first (torch.compile compiles
    # there) and, for kiln traced, the call that compiled a trace and the next one.
    counting = hasattr(sys_, "compiled_traces") and sys_.mode == "traced"
    walls = []
    for i in range(FIRST_CALLS if counting else 1):
        t0 = time.perf_counter()
        sys_.sync(call())
        walls.append(round((time.perf_counter() - t0) * 1e3, 3))
        if counting and "compile_call" not in res and sys_.compiled_traces():
            res["compile_call"] = i + 1
            res["compile_call_ms"] = walls[-1]
            res["compile_ms"] = sys_.kiln.explain().compile_ms
        elif "compile_call" in res:
            res["first_replay_ms"] = walls[-1]
            break
    res["first_calls_ms"] = walls
    res["first_call_s"] = round(walls[0] / 1e3, 4)
    if timed:
        for _ in range(args.warmup):
            sys_.sync(call())
    out = call()  # a compiled / replayed result, checked before timing
    sys_.sync(out)
    res["rel_err"] = rel_l2(sys_.to_numpy(out), refs)
    del out, refs
    if not res["rel_err"] <= args.tol:
        res["error"] = f"wrong result: rel L2 error {res['rel_err']:.2e} > {args.tol:g}"
    elif timed:
        t, calls, fastest = cw.time_loop(call, sys_.sync, args.target_ms / 1e3, args.repeats)
        res.update(us=round(t * 1e6, 3), min_us=round(fastest * 1e6, 3), calls=calls)
    if hasattr(sys_, "compiled_traces"):
        res.update(sys_.explain())


def worker(args):
    """Measures one system (args.worker) on the rows args.rows of the prepared data;
    rewrites args.worker_out after each row, so that a crash keeps what was done."""
    with open(os.path.join(args.data, "manifest.json")) as f:
        manifest = json.load(f)
    result = dict(rows=[])

    def save():
        with open(args.worker_out + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(args.worker_out + ".tmp", args.worker_out)

    try:
        if cw is None:
            raise ImportError(WORKER_IMPORT_ERROR)
        sys_ = MAKERS[args.worker](args.device)
    except Exception as e:  # ImportError, no device, a broken install, ...
        result["skipped"] = error_text(e)
        save()
        return
    result.update(version=sys_.version, device_name=sys_.device_name)
    if args.worker in LIMITS_FROM and args.limits:
        result["limits"] = measure_limits(sys_, args)
    try:
        start_s = sys_.start_compiler()
        if start_s is not None:
            result["compiler_start_s"] = round(start_s, 3)
    except Exception as e:
        result["compiler_start_error"] = error_text(e)
    save()
    for index in map(int, args.rows.split(",")):
        row = manifest["rows"][str(index)]
        result["current"] = index
        save()
        t0 = time.perf_counter()
        res = run_case(row, sys_, args, timed=args.worker != "kiln_warm")
        res["index"] = index
        result["rows"].append(res)
        result.pop("current")
        save()
        print(f"  [{LABELS[args.worker]}: {row['workload']} {row['size']}, "
              f"{time.perf_counter() - t0:.1f} s{', ' + res['error'] if 'error' in res else ''}]",
              file=sys.stderr, flush=True)


def probe(args):
    """One JSON line on stdout: can this interpreter import the system and see a GPU?"""
    info = dict(python=platform.python_version(), executable=sys.executable)
    try:
        if args.worker == "probe_kiln":
            import kiln

            info.update(version=kiln.__version__, cuda_built=kiln.cuda.is_built(),
                        cuda=kiln.cuda.is_available())
            if info["cuda"]:
                info["device_name"] = kiln.cuda.get_device_name(0)
        else:
            import torch

            info.update(version=torch.__version__, cuda=torch.cuda.is_available())
            if info["cuda"]:
                info["device_name"] = torch.cuda.get_device_name(0)
    except Exception as e:
        info["error"] = error_text(e)
    print(json.dumps(info))


def prepare(args):
    """Writes every selected row's inputs (float32, the same for every system) and the
    float64 eager reference of its outputs (rounded to float32) as .npy files, and
    manifest.json. PyTorch computes the reference on the device when it imports, numpy
    on the host otherwise."""
    if cw is None:
        sys.exit(f"cannot prepare the inputs here: {WORKER_IMPORT_ERROR}")
    try:
        import torch

        dev = "cuda" if args.device == "cuda" and torch.cuda.is_available() else "cpu"
        fns = cw.torch_like(torch)
        how = f"torch {torch.__version__} float64 on {dev}"

        def reference(name, inputs):
            ts = [torch.from_numpy(x).to(dev, torch.float64) for x in inputs]
            return [o.float().cpu().numpy() for o in cw.as_list(fns[name](*ts))]
    except ImportError:
        fns = cw.numpy_like(np, cw.np_sigmoid, cw.np_softmax)
        how = f"numpy {np.__version__} float64 on the host"

        def reference(name, inputs):
            return [np.asarray(o, dtype=np.float32)
                    for o in cw.as_list(fns[name](*[x.astype(np.float64) for x in inputs]))]

    rows = {}
    for index in map(int, args.rows.split(",")):
        name, size, shapes, flops = cases(args.quick)[index]
        inputs = cw.make_inputs(shapes, np.random.default_rng(index))
        refs = reference(name, inputs)
        row = dict(workload=name, size=size, flops=flops, inputs=[], refs=[],
                   bytes=sum(x.nbytes for x in inputs) + sum(r.size * F32 for r in refs))
        for kind, arrays in (("inputs", inputs), ("refs", refs)):
            for k, a in enumerate(arrays):
                fname = f"{index:02d}-{name}-{kind}{k}.npy"
                np.save(os.path.join(args.data, fname), a)
                row[kind].append(fname)
        rows[str(index)] = row
    with open(os.path.join(args.data, "manifest.json"), "w") as f:
        json.dump(dict(reference=how, rows=rows), f)


# ---- running the workers (in the main process)

LIVE = set()  # worker processes running now (each in its own process group)


def stop_workers(signum, frame):
    """SIGTERM / SIGINT (gpu_run.sh's step limit): stop the running worker, whose own
    process group the signal does not reach, then exit."""
    for proc in list(LIVE):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sys.exit(128 + signum)


def run_process(cmd, env, timeout):
    """Runs cmd in its own process group, passing its stderr through; returns (exit
    status or 'timeout', last stderr line that is not a progress line, stdout)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)
    LIVE.add(proc)
    tail = collections.deque(maxlen=30)

    def pump():
        for line in proc.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            if line.strip() and not line.startswith("  ["):
                tail.append(line.strip())

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    stdout = []
    out_reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
    out_reader.start()
    try:
        rc = proc.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and what it started (compilers)
        except ProcessLookupError:
            pass
        proc.wait()
        rc = "timeout"
    LIVE.discard(proc)
    reader.join(5)
    out_reader.join(5)
    last = next((t for t in reversed(tail) if not t.startswith(("warnings.warn", "W0", "I0"))), "")
    return rc, last[:200], "".join(stdout)


class Runner:
    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        self.start = time.perf_counter()
        self.deadline = self.start + args.budget

    def left(self):
        return self.deadline - time.perf_counter()

    def interpreter(self, name):
        return self.args.kiln_python if name.startswith("kiln") else self.args.torch_python

    def passthrough(self):
        a = self.args
        out = [f"--repeats={a.repeats}", f"--target-ms={a.target_ms}", f"--warmup={a.warmup}",
               f"--tol={a.tol}", f"--device={a.device}", f"--data={os.path.join(self.tmp, 'data')}"]
        return out + (["--quick"] if a.quick else [])

    def env(self, name):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        tmp = self.tmp
        # kiln traced cold: a fresh, empty cache; kiln_warm: a new process, that cache filled
        shared = name in ("kiln_traced", "kiln_warm")
        env["KILN_CACHE_DIR"] = os.path.join(tmp, "kiln-cache" if shared else f"kiln-cache-{name}")
        if name.startswith("torch"):
            env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tmp, f"inductor-{name}"))
            env.setdefault("TRITON_CACHE_DIR", os.path.join(tmp, f"triton-{name}"))
        return env

    def probe(self, which):
        interp = self.args.kiln_python if which == "probe_kiln" else self.args.torch_python
        try:
            rc, last, out = run_process(interp + [os.path.abspath(__file__), "--worker", which],
                                        dict(os.environ), min(120, max(5, self.left())))
        except OSError as e:
            return dict(error=f"cannot start {' '.join(interp)}: {e}")
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return dict(error=f"probe exited with status {rc}: {last}")

    def prepare(self, interps, indices):
        """Writes the inputs and the reference: under the first interpreter that can."""
        data = os.path.join(self.tmp, "data")
        os.makedirs(data, exist_ok=True)
        why = ""
        for interp in interps:
            rc, last, _ = run_process(interp + [os.path.abspath(__file__), "--worker", "prepare",
                                                "--rows", ",".join(map(str, indices))]
                                      + self.passthrough(), dict(os.environ),
                                      min(300, max(5, self.left())))
            try:
                with open(os.path.join(data, "manifest.json")) as f:
                    return json.load(f)
            except (OSError, ValueError):
                why = f"status {rc}: {last}"
        sys.exit(f"could not prepare the inputs ({why})")

    def run_system(self, name, indices, limit_s):
        """Runs the worker of one system over the rows `indices`; restarts it after the
        row it died in. Returns (meta, {index: result}) or (dict(skipped=...), {})."""
        meta, results, pending, attempts = {}, {}, list(indices), 0
        end = min(self.deadline, time.perf_counter() + limit_s)
        while pending:
            left = end - time.perf_counter()
            if left < 5:
                for i in pending:
                    results[i] = dict(error="not run: out of time")
                break
            out = os.path.join(self.tmp, f"{name}-{attempts}.json")
            cmd = self.interpreter(name) + [
                os.path.abspath(__file__), "--worker", name, "--worker-out", out,
                "--rows", ",".join(map(str, pending))] + self.passthrough()
            if attempts == 0:
                cmd.append("--limits")
            attempts += 1
            try:
                rc, last, _ = run_process(cmd, self.env(name), left)
            except OSError as e:
                return dict(skipped=f"cannot start {self.interpreter(name)[0]}: {e}"), {}
            try:
                with open(out) as f:
                    part = json.load(f)
            except (OSError, ValueError):
                part = {}
            if "skipped" in part:
                return dict(skipped=part["skipped"]), {}
            if not part and not meta:
                why = "timed out" if rc == "timeout" else f"exited with status {rc}"
                return dict(skipped=f"worker {why}: {last}"), {}
            for key in ("version", "device_name", "limits", "compiler_start_s",
                        "compiler_start_error"):
                if key in part:
                    meta.setdefault(key, part[key])
            for res in part.get("rows", []):
                results[res["index"]] = res
            pending = [i for i in pending if i not in results]
            if not pending:
                break
            current = part.get("current", pending[0])
            if current not in pending:
                current = pending[0]
            if rc == "timeout":
                results[current] = dict(error=f"timeout: stopped here at the time limit "
                                        f"({limit_s:.0f} s a system, --budget for the run)")
                for i in pending:
                    results.setdefault(i, dict(error="not run: out of time"))
                break
            why = f"worker died (status {rc})" + (f": {last}" if last else "")
            results[current] = dict(error=why)
            pending.remove(current)
            if attempts > 4:
                for i in pending:
                    results[i] = dict(error="not run: the worker kept dying")
                break
        return meta, results


# ---- report

def fmt_us(us):
    return f"{us:.3g}" if us < 100 else f"{us:,.0f}"


def fmt_ms(ms):
    return f"{ms:.3g}" if ms < 1000 else f"{ms:,.0f}"


def cell_error(res):
    return "error: " + first_line(res["error"], 60).replace("|", "/")


def main_table(rows, names):
    base = "kiln_traced" if "kiln_traced" in names else names[0]
    others = [n for n in names if n != base]
    head = ["workload", "size", "floor us", f"{LABELS[base]} us"]
    if base == "kiln_traced":
        head += ["% floor", "kernels", "backend"]
    head += [LABELS[n] for n in others]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        b = r["results"].get(base, {})
        cells = [r["workload"], r["size"], fmt_us(r["floor_us"]) if r["floor_us"] else "n/a"]
        cells.append(fmt_us(b["us"]) if "us" in b else cell_error(b) if "error" in b else "n/a")
        if base == "kiln_traced":
            cells.append(f"{100 * r['floor_us'] / b['us']:.0f}%" if "us" in b and r["floor_us"]
                         else "")
            hot = "us" in b and b.get("traces")
            cells.append(str(b["kernels"]) if hot else "eager" if "us" in b else "")
            cells.append(",".join(b.get("backends", [])) if hot else "")
        for n in others:
            s = r["results"].get(n, {})
            if "us" in s:
                ratio = f" ({s['us'] / b['us']:.2f}x)" if "us" in b else ""
                cells.append(fmt_us(s["us"]) + ratio)
            else:
                cells.append(cell_error(s) if "error" in s else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def first_call_table(rows, names):
    cols = [n for n in ("kiln_traced", "kiln_warm", "torch_compile", "torch_compile_ro")
            if n in names]
    if not cols:
        return ""
    heads = {"kiln_traced": "kiln traced cold ms (compile ms)",
             "kiln_warm": "kiln traced warm ms (compile ms)",
             "torch_compile": "torch.compile first call ms",
             "torch_compile_ro": "torch.compile ro first call ms"}
    head = ["workload", "size"] + [heads[n] for n in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["workload"], r["size"]]
        for n in cols:
            res = r["results"].get(n, {})
            if n.startswith("kiln") and "compile_call_ms" in res:
                cells.append(f"{fmt_ms(res['compile_call_ms'])} ({fmt_ms(res['compile_ms'])})"
                             + (" (then: error)" if "error" in res else ""))
            elif n.startswith("kiln") and "first_calls_ms" in res and "error" not in res:
                cells.append("no trace compiled")
            elif not n.startswith("kiln") and "first_call_s" in res:
                cells.append(fmt_ms(res["first_call_s"] * 1e3) + (" (then: error)" if "error" in res
                                                                  else ""))
            else:
                cells.append(cell_error(res) if "error" in res else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cell_notes(rows, names, most=12):
    """Notes on cells: long errors, kiln traced running eagerly, graph breaks, JIT notes
    (at most `most` lines; every one is in the JSON)."""
    notes = []
    for r in rows:
        for n in names:
            res, where = r["results"].get(n, {}), f"{r['workload']} {r['size']}, {LABELS[n]}"
            if "error" in res and len(res["error"]) > 60:
                notes.append(f"{where}: {res['error']}")
            if n == "kiln_traced" and "us" in res and not res.get("traces"):
                notes.append(f"{where}: no compiled trace replayed (ran eagerly)")
            if n == "kiln_traced" and res.get("graph_breaks"):
                notes.append(f"{where}: {res['graph_breaks']} graph break site(s)")
            if n == "kiln_traced":
                for note in sorted(set(res.get("jit_notes", [])))[:3]:
                    notes.append(f"{where}: jit note: {first_line(note, 160)}")
    return notes[:most] + ([f"({len(notes) - most} more notes in the JSON)"]
                           if len(notes) > most else [])


def device_line(probes, device):
    names = [f"{lib}.cuda.get_device_name(): {info['device_name']}"
             for lib, info in probes.items() if info.get("device_name")]
    if device == "cpu":
        names.insert(0, f"the CPU ({platform.processor() or platform.machine()}, --device cpu)")
    return "device: " + ("; ".join(names) if names else "no CUDA device")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--quick", action="store_true",
                   help="small sizes only (no 2^26, 4096-batch mlp3 or full attention), "
                   "3 repeats, short loops: about a minute")
    p.add_argument("--only", default="", help="comma list of workloads (add_relu_mul, gelu_tanh, "
                   "sin_cos, softmax, layernorm, mlp3, lstm_cell, attention)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma list of {', '.join(SYSTEMS)} (default: all)")
    p.add_argument("--json", default="", help="write every figure (and the tables) to this file")
    p.add_argument("--kiln-python", default=os.environ.get("KILN_PYTHON", sys.executable),
                   help="command that runs a Python which imports kiln (a path, or a command "
                   "line split on spaces; env KILN_PYTHON; default: this interpreter)")
    p.add_argument("--torch-python", default=sys.executable,
                   help="Python with PyTorch for the torch workers (default: this interpreter)")
    p.add_argument("--budget", type=float, default=330.0, metavar="S",
                   help="wall-clock budget of the whole run; workers still running at its end "
                   "are stopped and their cells marked (default 330)")
    p.add_argument("--system-limit", type=float, default=150.0, metavar="S",
                   help="most seconds one system's workers may take (default 150)")
    p.add_argument("--repeats", type=int, default=None, help="timed loops per cell (default 7)")
    p.add_argument("--target-ms", type=float, default=None,
                   help="length of one timed loop (default 50; quick 20)")
    p.add_argument("--warmup", type=int, default=5, help="calls between the first calls and the "
                   "checked call (kiln traced compiles after 2, torch's reduce-overhead records "
                   "its graph after 1)")
    p.add_argument("--tol", type=float, default=1e-4, help="max relative L2 error (default 1e-4)")
    p.add_argument("--dry-run", action="store_true",
                   help="probe the interpreters and the GPU, print the plan, measure nothing")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help=argparse.SUPPRESS)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    p.add_argument("--rows", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--limits", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.repeats = args.repeats or (3 if args.quick else 7)
    args.target_ms = args.target_ms or (20.0 if args.quick else 50.0)
    if args.worker in ("probe_kiln", "probe_torch"):
        return probe(args)
    if args.worker == "prepare":
        return prepare(args)
    if args.worker:
        return worker(args)

    names = [s for s in args.systems.split(",") if s]
    bad = [s for s in names if s not in SYSTEMS]
    if bad:
        p.error(f"unknown systems {bad}; choose among {', '.join(SYSTEMS)}")
    known = {c[0] for c in cases(False)}
    only = [w for w in args.only.split(",") if w]
    if set(only) - known:
        p.error(f"--only takes workloads among {sorted(known)}")
    args.kiln_python = (args.kiln_python.split() if not os.path.exists(args.kiln_python)
                        else [args.kiln_python])
    args.torch_python = [args.torch_python]
    all_cases = cases(args.quick)
    indices = [i for i, c in enumerate(all_cases) if not only or c[0] in only]
    mode = "quick" if args.quick else "full"

    tmp = tempfile.mkdtemp(prefix="kiln-gpu-bench-")
    signal.signal(signal.SIGTERM, stop_workers)
    signal.signal(signal.SIGINT, stop_workers)
    try:
        return run(args, names, indices, all_cases, mode, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args, names, indices, all_cases, mode, tmp):
    runner = Runner(args, tmp)
    want_kiln = any(n.startswith("kiln") for n in names)
    want_torch = any(n.startswith("torch") for n in names)
    probes = {}
    if want_kiln:
        probes["kiln"] = runner.probe("probe_kiln")
    probes["torch"] = runner.probe("probe_torch")  # also the reference's device
    devices = {}
    for lib, info in probes.items():
        if "error" in info:
            devices[lib] = f"{lib} not usable: {info['error']}"
        elif args.device == "cpu":
            devices[lib] = f"{lib} {info['version']} on the CPU (--device cpu)"
        elif info.get("cuda"):
            devices[lib] = f"{lib} {info['version']}: {info['device_name']}"
        else:
            devices[lib] = f"{lib} {info['version']}: no CUDA device visible"
    print(f"gpu_workloads ({mode} run): {device_line(probes, args.device)}")
    for lib in probes:
        print(f"- {devices[lib]} (python {probes[lib].get('python', '?')})")
    sys.stdout.flush()
    gpu_seen = args.device == "cpu" or any(i.get("cuda") for i in probes.values())
    if not gpu_seen:
        print("\nno CUDA GPU visible to " + " or ".join(probes) + ": nothing to measure here "
              "(run it on the GPU machine: bash scripts/gpu_run.sh)")
        return 0 if args.dry_run else 3
    plan = [n for n in names]
    if "kiln_traced" in names:
        plan.insert(plan.index("kiln_traced") + 1, "kiln_warm")
    if args.dry_run:
        print(f"\nwould run {len(indices)} workloads "
              f"({', '.join(all_cases[i][0] + ' ' + all_cases[i][1] for i in indices)})")
        for n in plan:
            print(f"- {LABELS[n]}: {' '.join(runner.interpreter(n))}")
        return 0

    # ---- inputs and reference, then each system in its own worker
    interps = [args.torch_python] + ([args.kiln_python] if want_kiln else [])
    if "error" in probes["torch"] and want_kiln:
        interps.reverse()
    t0 = time.perf_counter()
    manifest = runner.prepare(interps, indices)
    print(f"- inputs and reference ({manifest['reference']}): "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    results, metas, notes = {}, {}, []
    for name in plan:
        if not want_torch and name.startswith("torch"):
            continue
        lib = "kiln" if name.startswith("kiln") else "torch"
        if "error" in probes.get(lib, {}):
            notes.append(f"{LABELS[name]} skipped: {probes[lib]['error']}")
            continue
        if runner.left() < 10:
            notes.append(f"{LABELS[name]} not run: the time budget (--budget) was spent")
            continue
        t0 = time.perf_counter()
        print(f"=== {LABELS[name]} ({' '.join(runner.interpreter(name))})", file=sys.stderr,
              flush=True)
        meta, res = runner.run_system(name, indices, args.system_limit)
        if "skipped" in meta:
            notes.append(f"{LABELS[name]} skipped: {meta['skipped']}")
            continue
        meta["elapsed_s"] = round(time.perf_counter() - t0, 1)
        metas[name], results[name] = meta, res
    names = [n for n in plan if n in results]
    timed = [n for n in names if n != "kiln_warm"]
    if not timed:
        print("\nno system could be measured:\n" + "\n".join(f"- {n}" for n in notes))
        return 1

    limits = {}
    for n, m in metas.items():
        for key, value in m.get("limits", {}).items():
            limits.setdefault(key, {})[n] = value
    bw = max(limits.get("copy_GBps", {}).values(), default=math.inf) * 1e9
    rate = max(limits.get("matmul_GFLOPs", {}).values(), default=math.inf) * 1e9
    launch = min(limits.get("graph_launch_us", {}).values(), default=0.0)
    rows = []
    for i in indices:
        m = manifest["rows"][str(i)]
        bounds = {"bandwidth": m["bytes"] / bw * 1e6, "flops": m["flops"] / rate * 1e6,
                  "launch": launch}
        floor_by = max(bounds, key=bounds.get)
        rows.append(dict(workload=m["workload"], size=m["size"], bytes=m["bytes"],
                         flops=m["flops"], floor_us=round(bounds[floor_by], 3),
                         floor_by=floor_by if bounds[floor_by] else None,
                         results={n: results[n].get(i, dict(error="no result")) for n in names}))
    for r in rows:
        for n, res in r["results"].items():
            if "us" in res and r["floor_us"]:
                res["pct_floor"] = round(100 * r["floor_us"] / res["us"], 1)
    elapsed = time.perf_counter() - runner.start

    base = "kiln_traced" if "kiln_traced" in timed else timed[0]
    out = [f"# kiln GPU workloads ({mode} run, each system in its own process)", ""]
    out.append(device_line(probes, args.device))
    for n in names:
        m = metas[n]
        start = (f"; compiler start {m['compiler_start_s']:.2f} s" if "compiler_start_s" in m
                 else f"; compiler start failed: {m['compiler_start_error']}"
                 if "compiler_start_error" in m else "")
        out.append(f"- {LABELS[n]}: {m['version']} (worker {m['elapsed_s']} s{start})")
    out += [f"- {n}" for n in notes]
    out.append(f"- inputs and reference: {manifest['reference']}")
    for key, what in (("copy_GBps", "device-to-device copy GB/s (read + write)"),
                      ("matmul_GFLOPs", "float32 matmul GFLOP/s (TF32 off)"),
                      ("graph_launch_us", "one-kernel CUDA graph replay from Python, us"),
                      ("tiny_op_us", "tiny eager op from Python, us")):
        if key in limits:
            out.append(f"- {what}: " + ", ".join(f"{LABELS[n]} {v:g}" for n, v in
                                                  limits[key].items()))
    tables = [out[0], "", out[2], "", main_table(rows, timed), "",
              f"us per call, median of {args.repeats}; (Nx) = time / {LABELS[base]}; % floor = "
              f"floor / {LABELS[base]}; the full report with its notes: the run's output"]
    out += ["", tables[4], ""]
    out.append(f"us per call: N calls, synchronize, divide; median of {args.repeats}. (Nx) = "
               f"that system's time / {LABELS[base]} (>1: {LABELS[base]} is faster). floor = "
               "max(bytes in+out / best copy bandwidth, flops / best matmul rate, one graph "
               f"launch); % floor = floor / {LABELS[base]}. kernels: per call, from "
               "kiln.explain() (cuBLAS calls count); backend: the traces' backend there. "
               f"Every result was checked against the float64 reference first (rel L2 <= "
               f"{args.tol:g}).")
    out += [f"- {n}" for n in cell_notes(rows, names)]
    ctable = first_call_table(rows, names)
    if ctable:
        tables += ["", "First calls (ms):", "", ctable]
        out += ["", "First calls (synchronized wall time of the call that compiles):", "",
                ctable, "",
                "kiln cold: a fresh, empty KILN_CACHE_DIR (a workload's second size may reuse "
                "kernels of its first); warm: a new process with that cache filled; in brackets "
                "compile_ms from kiln.explain(). torch.compile: its first call, inductor and "
                "Triton caches "
                + ("as set in the environment" if "TORCHINDUCTOR_CACHE_DIR" in os.environ
                   else "cold") + ". Each compiling process first compiles a small unrelated "
                "function (its one-time start, 'compiler start' above), so these are the "
                "workloads' own compiles."]
    out.append(f"\ntotal {elapsed:.0f} s")
    report = "\n".join(out)
    print("\n" + report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(mode=mode, device=args.device, probes=probes, systems=metas,
                           limits=limits, notes=notes, repeats=args.repeats,
                           target_ms=args.target_ms, tol=args.tol, elapsed_s=round(elapsed, 1),
                           reference=manifest["reference"], rows=rows, report=report,
                           tables="\n".join(tables)),
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
