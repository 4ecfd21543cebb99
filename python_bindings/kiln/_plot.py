"""kiln.plot_warmup: per-iteration time across warmup -> compile -> replay.

    times = []
    for i in range(50):
        t0 = time.perf_counter(); step(); times.append(time.perf_counter() - t0)
    kiln.plot_warmup(times, events=[(2, "compile")], path="warmup.svg")

Uses matplotlib when it imports (Debian's python3-matplotlib); otherwise, or with
``backend="svg"`` or ``KILN_PLOT_BACKEND=svg``, writes the SVG by hand (no
dependencies). A ``.png`` path needs matplotlib.
"""

import math
import os
from xml.sax.saxutils import escape

__all__ = ["plot_warmup"]


def _normalize_events(events):
    """events: iterable of iteration indices or (index, label) pairs."""
    out = []
    for e in events or ():
        if isinstance(e, (tuple, list)):
            out.append((int(e[0]), str(e[1]) if len(e) > 1 else "compile"))
        else:
            out.append((int(e), "compile"))
    return out


def _have_matplotlib():
    try:
        import matplotlib  # noqa: F401  (only whether it imports)
        return True
    except ImportError:
        return False


def plot_warmup(times, events=None, path="warmup.svg", title="kiln: time per iteration",
                unit="ms", backend=None):
    """Draws times[i] (seconds) for each iteration i on a log axis in ``unit`` ("ms" or
    "us"), with a vertical marker and label per event (an iteration index, or an
    (index, label) pair, e.g. where a trace compiled). Writes ``path`` (.svg or .png)
    and returns it. backend: "matplotlib", "svg" or None (KILN_PLOT_BACKEND, else
    matplotlib when importable, else svg)."""
    times = [float(t) for t in times]
    if not times:
        raise ValueError("[plot_warmup] times is empty")
    if unit not in ("ms", "us"):
        raise ValueError(f"[plot_warmup] unit must be 'ms' or 'us', got {unit!r}")
    scale = 1e3 if unit == "ms" else 1e6
    values = [max(t * scale, 1e-9) for t in times]
    marks = _normalize_events(events)
    backend = backend or os.environ.get("KILN_PLOT_BACKEND") or (
        "matplotlib" if _have_matplotlib() else "svg")
    path = os.fspath(path)
    if backend == "matplotlib":
        _plot_matplotlib(values, marks, path, title, unit)
    elif backend == "svg":
        if path.lower().endswith(".png"):
            raise ValueError("[plot_warmup] a .png needs matplotlib; write an .svg instead")
        with open(path, "w", encoding="utf-8") as f:
            f.write(_svg(values, marks, title, unit))
    else:
        raise ValueError(f"[plot_warmup] backend must be 'matplotlib' or 'svg', got {backend!r}")
    return path


def _plot_matplotlib(values, marks, path, title, unit):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.plot(range(len(values)), values, marker="o", markersize=3, linewidth=1,
            color="#1f77b4", label="time per iteration")
    ax.set_yscale("log")
    fmt = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(fmt)
    ax.yaxis.set_minor_formatter(fmt)
    for i, label in marks:
        ax.axvline(i, color="#d62728", linestyle="--", linewidth=1)
        ax.annotate(label, (i, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(3, -12), textcoords="offset points", color="#d62728",
                    fontsize=8, rotation=0)
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"time per iteration ({unit}, log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _log_ticks(lo, hi):
    """Decades (and 2x, 5x when few decades) between lo and hi."""
    ticks = []
    for d in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in ((1, 2, 5) if math.log10(hi / lo) < 2.5 else (1,)):
            v = m * 10.0 ** d
            if lo <= v <= hi:
                ticks.append(v)
    return ticks or [lo, hi]


def _fmt(v):
    return f"{v:.3g}"


def _svg(values, marks, title, unit):
    """A hand-written SVG: axes, ticks, labels, the series (polyline + one circle per
    point, class "point") and one dashed line per event (class "event")."""
    W, H = 800, 450
    left, right, top, bottom = 80, 20, 40, 60
    pw, ph = W - left - right, H - top - bottom
    lo, hi = min(values), max(values)
    lo, hi = lo / 1.25, hi * 1.25
    n = len(values)

    def x(i):
        return left + (pw * i / (n - 1) if n > 1 else pw / 2)

    def y(v):
        return top + ph * (1 - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">',
           f'<title>{escape(title)}</title>',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>']
    # axes and ticks
    out.append(f'<g class="axes" stroke="black" fill="none">'
               f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}"/>'
               f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}"/></g>')
    for v in _log_ticks(lo, hi):
        yy = y(v)
        out.append(f'<g class="ytick"><line x1="{left - 5}" y1="{yy:.1f}" x2="{left + pw}" '
                   f'y2="{yy:.1f}" stroke="#ddd"/><text x="{left - 8}" y="{yy + 4:.1f}" '
                   f'text-anchor="end">{_fmt(v)}</text></g>')
    step = max(1, 10 ** math.floor(math.log10(max(n - 1, 1))))
    if (n - 1) / step < 4:
        step = max(1, step // 2)
    for i in range(0, n, step):
        xx = x(i)
        out.append(f'<g class="xtick"><line x1="{xx:.1f}" y1="{top + ph}" x2="{xx:.1f}" '
                   f'y2="{top + ph + 5}" stroke="black"/><text x="{xx:.1f}" y="{top + ph + 18}" '
                   f'text-anchor="middle">{i}</text></g>')
    out.append(f'<text x="{left + pw / 2}" y="{H - 15}" text-anchor="middle">iteration</text>')
    out.append(f'<text transform="translate(20,{top + ph / 2}) rotate(-90)" '
               f'text-anchor="middle">time per iteration ({unit}, log scale)</text>')
    # events
    for i, label in marks:
        xx = x(min(max(i, 0), n - 1))
        out.append(f'<g class="event"><line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" '
                   f'y2="{top + ph}" stroke="#d62728" stroke-dasharray="5,3"/>'
                   f'<text x="{xx + 3:.1f}" y="{top + 12}" fill="#d62728">{escape(label)}</text></g>')
    # the series
    pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    out.append(f'<polyline class="series" points="{pts}" fill="none" stroke="#1f77b4"/>')
    out.append('<g class="points" fill="#1f77b4">')
    out.extend(f'<circle class="point" cx="{x(i):.1f}" cy="{y(v):.1f}" r="2.5">'
               f'<title>iteration {i}: {_fmt(v)} {unit}</title></circle>'
               for i, v in enumerate(values))
    out.append("</g></svg>\n")
    return "\n".join(out)
