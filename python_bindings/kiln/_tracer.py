"""The tracer, from Python: kiln records the op stream of eager code, compiles a
sequence once it has repeated (the warmup) and replays it from then on.

    @kiln.compile(warmup=2, fullgraph=False)
    def step(x, w):
        return kiln.relu(x @ w).sum()

    with kiln.region("attention"):
        ...

    print(kiln.explain())          # traces, graph breaks with their cost, recompiles

Automatic tracing of all eager code is on by default (``KILN_TRACE=0`` or
``kiln.set_tracing(False)`` turns it off; regions and ``compile`` still trace).
Trace boundaries: region entry and exit, host reads (``item()``, ``tolist()``,
``numpy()``, printing, ``bool(t)``, copies to the host), the loop coming round to an
op that started the trace, and a maximum trace length.
"""

import functools as _functools
import json as _json

from . import _kiln as _C

GraphBreakError = _C.GraphBreakError


class region:
    """A traced region: its entry and exit are trace boundaries.

    warmup: how many times a trace in it must be seen before it compiles (default:
    KILN_WARMUP, 2). fullgraph: raise GraphBreakError at the first graph break inside.
    Usable as ``with kiln.region("name"):`` or as a decorator.
    """

    def __init__(self, name="region", warmup=None, fullgraph=False):
        if warmup is not None and (not isinstance(warmup, int) or warmup < 1):
            raise ValueError(f"[region] warmup must be a positive int, got {warmup!r}")
        self.name = str(name)
        self.warmup = -1 if warmup is None else int(warmup)
        self.fullgraph = bool(fullgraph)

    def __enter__(self):
        _C._region_enter(self.name, self.warmup, self.fullgraph)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            try:
                _C._region_exit(True)
            except Exception:  # the user's exception wins
                pass
            return False
        _C._region_exit(False)
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with region(self.name, None if self.warmup < 0 else self.warmup, self.fullgraph):
                return fn(*args, **kwargs)

        return wrapped


class _library_loop:
    """Marks a loop of kiln's own helpers (over parameters): the tracer closes no loop
    inside it, so one step stays one trace."""

    def __enter__(self):
        _C._library_loop(True)

    def __exit__(self, *exc):
        _C._library_loop(False)
        return False


_MODES = ("default", "reduce-overhead", "max-autotune")


def compile(fn=None, *, warmup=None, fullgraph=False, mode="default", name=None, skip=False):
    """Marks fn as a traced region, called as usual: ``kiln.compile(fn)`` or
    ``@kiln.compile(warmup=3, fullgraph=True)``.

    Each call runs fn; its op stream is recorded, compiled after ``warmup`` calls and
    replayed lazily from then on (safe whatever fn does between ops). mode is accepted
    for PyTorch compatibility; every mode currently replays this way.

    skip=True (opt-in): once a call's trace is verified break-free, later calls launch
    the compiled plan without running fn's body, guarded on the arguments that are not
    tensors, the globals and module state fn read, and the tensors' kinds; fn must have
    no side effects beyond its tensor ops (docs/tracer.md, "Skipping the function").
    A body that has any is never skipped; the results always equal running it.

    An nn.Module comes back wrapped as PyTorch's does (OptimizedModule): the module
    at ``_orig_mod``, its attributes forwarded, state_dict keys prefixed ``_orig_mod.``.
    """
    if mode not in _MODES:
        raise ValueError(f"[compile] mode must be one of {_MODES}, got {mode!r}")

    def decorate(f):
        from .nn.modules.module import Module

        if isinstance(f, Module):
            from ._compiled_module import OptimizedModule

            return OptimizedModule(f, region(name or type(f).__name__, warmup, fullgraph), skip)
        if not callable(f):
            raise TypeError(f"[compile] expected a callable, got {type(f).__name__}")
        label = name or getattr(f, "__qualname__", getattr(f, "__name__", "compiled"))
        if skip:
            from ._skip import SkippingFunction

            skipping = SkippingFunction(f, region(label, warmup, fullgraph))
            return _functools.update_wrapper(skipping, f)
        return region(label, warmup, fullgraph)(f)

    return decorate if fn is None else decorate(fn)


class Explanation:
    """What the tracer did: ``traces`` (each with ``replay_median_ms`` and
    ``eager_median_ms``, its replays measured against eager for its own ops, None until
    measured; ``stays_eager`` with ``eager_reason`` when they were slower), ``graph_breaks`` (reason; kind and phase:
    its row and phase in tracer/break_reasons.def; file, line, function, count, eager_ms: time spent eager because of it, eager_ops, est_saving_ms: an ESTIMATE
    of what compiling through it would save, eager_ms minus those ops at the measured
    replay time per op, None before any replay), ``recompiles`` (the guard that
    failed), as lists of dicts. ``str()`` is a table; ``json()`` the raw report."""

    def __init__(self, table, raw):
        self._table = table
        self._json = raw
        data = _json.loads(raw)
        self.traces = data["traces"]
        self.graph_breaks = data["graph_breaks"]
        self.recompiles = data["recompiles"]
        self.eager_traces = data["eager_anchors"]
        self.ops_recorded = data["ops_recorded"]
        self.ops_replayed = data["ops_replayed"]
        self.compile_ms = data["compile_ms"]
        self.replay_ns_per_op = data.get("replay_ns_per_op")
        self.head_penalties = data.get("head_penalties", 0)
        self.unrolled_loops = data.get("unrolled_loops", 0)
        self.fresh_path_suspensions = data.get("fresh_path_suspensions", 0)
        self.independent_reads = data.get("independent_reads", 0)
        self.host_side_ops = data.get("host_side_ops", 0)
        self.stored_loaded = data.get("stored_loaded", 0)
        self.stored_refused = data.get("stored_refused", 0)

    def json(self):
        return self._json

    def table(self):
        return self._table

    def __str__(self):
        return self._table

    __repr__ = __str__


def explain():
    """The tracer's report for this thread (see Explanation)."""
    return Explanation(*_C._explain())


def reset():
    """Forgets every trace, graph break and statistic of this thread."""
    _C._reset()


def synchronize_compiles():
    """Waits for this thread's background compiles and installs their plans (a trace
    being walked gets its plan at its next walk). Hot traces compile on a background
    thread while the loop runs eagerly (KILN_COMPILE_SYNC=1, or
    set_config(background_compile=False), compiles them on the spot instead); this is
    for code that counts compiles, never needed for right answers."""
    _C._wait_for_compiles()


def set_tracing(enabled):
    """Turns automatic tracing of eager code on or off (regions still trace)."""
    _C._set_tracing(bool(enabled))


def is_tracing():
    return _C._tracing_enabled()


def set_config(**settings):
    """Changes tracer settings: warmup, recompile_limit, max_trace_length, verify,
    background_compile, warm_start, symbolic_shapes, cpu_attention (KILN_JIT_CPU_ATTENTION:
    the JIT's attention pass on CPU traces too), jit_disable (a comma list like
    KILN_JIT_DISABLE), logs (a comma list like KILN_LOGS). Returns the previous values."""
    previous = {}
    for key, value in settings.items():
        previous[key] = _C._get_config(key)
        _C._set_config(key, value)
    return previous
