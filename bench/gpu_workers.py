"""The worker side of bench/gpu_workloads.py (run as ``gpu_workloads.py --worker ...``):
the systems on a device (kiln and PyTorch, each wrapping cpu_workloads' system), one
workload measured on one system, the interpreter probe and the inputs and reference."""

import json
import math
import os
import platform
import sys
import time

from gpu_common import F32, FIRST_CALLS, LABELS, cases, error_text

try:  # the workers need numpy and cpu_workloads' workload functions; the main process not
    import numpy as np
    import cpu_workloads as cw  # the workload functions, inputs, the timed loop
except ImportError as e:
    np = cw = None
    WORKER_IMPORT_ERROR = f"{type(e).__name__}: {e}"


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


# ---- the systems (in the worker). Each wraps cpu_workloads' system for a device.

class KilnGpu(cw.Kiln if cw else object):
    """mode 'eager': tracing off, plain eager dispatch; 'traced': kiln.compile(fn)."""

    def __init__(self, mode, device):
        super().__init__(mode)  # cw.Kiln: kiln.set_tracing(False) for both modes
        kiln = self.kiln
        self.device = device
        if mode == "traced":
            # Compiles on the calling thread (the default is in the background): the
            # table times the call that compiles (cold and warm cache) and then the
            # replays, so no timed loop runs eagerly beside a compile still in flight.
            kiln.set_config(background_compile=False)
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
