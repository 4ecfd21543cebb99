"""PyTorch-style ``repr`` for tensors (the rules of torch/_tensor_str.py, default options).

    tensor([[ 0.1234, -1.5000],
            [ 2.0000,  3.0000]])
    tensor([1., 2.], device='cuda:0', dtype=kiln.float16)

Values are read on the host (a sync point). Tensors over 1000 elements are summarized
with the first and last 3 entries of each dim.
"""

import math

PRECISION = 4
THRESHOLD = 1000
EDGEITEMS = 3
LINEWIDTH = 80

_ELLIPSIS = object()


def _values(t, summarize):
    """Nested lists of Python numbers, with _ELLIPSIS where entries were skipped."""
    if t.ndim == 0:
        return t.item()
    if not summarize:
        return t.tolist()
    n = t.shape[0]
    if n > 2 * EDGEITEMS:
        head = [_values(t[i], True) for i in range(EDGEITEMS)]
        tail = [_values(t[i], True) for i in range(n - EDGEITEMS, n)]
        return head + [_ELLIPSIS] + tail
    return [_values(t[i], True) for i in range(n)]


def _flat(values, out):
    if isinstance(values, list):
        for v in values:
            _flat(v, out)
    elif values is not _ELLIPSIS:
        out.append(values)
    return out


class _Formatter:
    """torch._tensor_str._Formatter: the width and style (int / fixed / scientific)
    shared by every element printed."""

    def __init__(self, values, floating):
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.width = 1
        if not floating:
            self.width = max((len(str(v)) for v in values), default=1)
            return
        finite = [v for v in values if math.isfinite(v) and v != 0]
        if not finite:
            return
        lo, hi = min(abs(v) for v in finite), max(abs(v) for v in finite)
        self.int_mode = all(v == math.ceil(v) for v in finite)
        if self.int_mode:
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8
        else:
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
        self.width = max(len(self._text(v)) for v in finite)

    def _text(self, v):
        if not self.floating:
            return str(v)
        if self.sci_mode:
            return f"{v:.{PRECISION}e}"
        if self.int_mode:
            text = f"{v:.0f}"
            return text if math.isinf(v) or math.isnan(v) else text + "."
        return f"{v:.{PRECISION}f}"

    def format(self, v):
        return self._text(v).rjust(self.width)


def _format_rows(values, fmt, indent, ndim):
    """values: nested list with ndim >= 1 dims; indent: column of the opening bracket."""
    if ndim == 1:  # innermost dim: wrap at LINEWIDTH
        items = [" ..." if v is _ELLIPSIS else fmt.format(v) for v in values]
        per_line = max(1, (LINEWIDTH - indent) // (fmt.width + 2))
        lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    sep = "," + "\n" * (ndim - 1) + " " * (indent + 1)
    parts = ["..." if v is _ELLIPSIS else _format_rows(v, fmt, indent + 1, ndim - 1)
             for v in values]
    return "[" + sep.join(parts) + "]"


def tensor_repr(t, prefix="tensor("):
    from . import _C

    dtype = t.dtype
    suffixes = []
    if t.device.type != "cpu":
        suffixes.append(f"device='{t.device}'")
    floating = dtype.is_floating_point
    if t.numel() == 0:
        body = "[]"
        if t.ndim != 1:
            suffixes.append(f"size={tuple(t.shape)}")
        if dtype != _C.float32:  # nothing to infer the dtype from: always shown
            suffixes.append(f"dtype={dtype}")
        return prefix + body + "".join(", " + s for s in suffixes) + ")"
    else:
        summarize = t.numel() > THRESHOLD
        values = _values(t, summarize)
        fmt = _Formatter(_flat(values, []) if isinstance(values, list) else [values],
                         floating)
        if t.ndim == 0:
            body = fmt._text(values)
        else:
            body = _format_rows(values, fmt, len(prefix), t.ndim)
    if dtype not in (_C.float32, _C.int64, _C.bool):
        suffixes.append(f"dtype={dtype}")
    return prefix + body + "".join(", " + s for s in suffixes) + ")"
