"""The profiler, from Python (like torch.profiler):

    with kiln.profile() as prof:
        for _ in range(10):
            step(x)
    print(prof.table(sort_by="total"))    # per op / replay / compile / graph break
    prof.export_chrome_trace("trace.json")  # Perfetto / chrome://tracing
    prof.events                           # list of dicts (kind, name, start_us, dur_us, ...)
    prof.break_costs()                    # per graph-break site: count, eager_ms, estimate

Records this thread only: every eager op, compiled-trace replay, compile, graph break
and side-exit materialization (host clock; CUDA work also gets GPU times from events).
``est_saving_ms`` in break_costs() is an ESTIMATE: the break's eager time minus the same
number of ops at the replay time per op measured in this profile (None when no replay
has been measured).
"""

from . import _kiln as _C

_SORT_KEYS = ("total", "self", "count", "avg", "name")


class profile:
    """A profile of this thread while the ``with`` block runs (or between start() and
    stop())."""

    def __init__(self):
        self._p = None
        self._events = None

    def start(self):
        if self._p is not None and self._p.running:
            raise RuntimeError("[profile] already running")
        self._p = _C._Profile()
        self._events = None
        return self

    def stop(self):
        if self._p is not None:
            self._p.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        return False

    def _profile(self):
        if self._p is None:
            raise RuntimeError("[profile] not started: use `with kiln.profile() as prof:`")
        return self._p

    @property
    def events(self):
        """Every event as a dict: kind (op, replay, compile, graph_break, materialize),
        name, device, start_us, dur_us (since the profile started), and per kind: trace,
        backend, kernels, ops; reason, file, line, function, eager_ops, eager_ms;
        gpu_start_us / gpu_dur_us for CUDA work."""
        p = self._profile()
        if self._events is None or p.running:
            self._events = p.events()
        return self._events

    @property
    def wall_ms(self):
        return self._profile().wall_ms()

    def table(self, sort_by="total", row_limit=-1):
        """A summary per key (op name, "replay trace N", "compile trace N", "graph break
        <reason> at file:line"): count, total, self, avg ms and % of the profiled wall
        time, then the graph-break costs. sort_by: total, self, count, avg or name."""
        if sort_by not in _SORT_KEYS:
            raise ValueError(
                f"[profile.table] sort_by must be one of {_SORT_KEYS}, got {sort_by!r}"
            )
        return self._profile().table(sort_by, int(row_limit))

    def key_averages(self):  # torch.profiler spelling: prof.key_averages().table()
        return self

    def export_chrome_trace(self, path):
        """Writes Chrome trace event JSON (open it in https://ui.perfetto.dev)."""
        self._profile().export_chrome_trace(str(path))

    def break_costs(self):
        """Per graph-break site, most costly first: reason, file, line, function, site,
        count, eager_ops, eager_ms (time run eagerly in the trace segments it cut) and
        est_saving_ms (an estimate, see the module doc; None without a measured replay)."""
        return self._profile().break_costs()

    def __str__(self):
        return self.table()
