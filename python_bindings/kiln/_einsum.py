"""kiln.einsum: PyTorch's einsum composed of permute / reshape / sum and batched matmul,
so autograd and the tracer see ordinary ops.

Covered: any number of operands (contracted left to right), explicit ('ij,jk->ik') and
implicit ('ij,jk': the letters seen once, in alphabetical order) outputs, '...' for
leading or inner broadcast dims, size-1 dims broadcasting, letters summed away inside one
operand ('ij->i'), and within a single operand one repeated letter (a diagonal: 'ii->i',
trace 'ii->', 'bii->bi'). A letter repeated inside an operand of a multi-operand
equation, or in the output, is refused with a RuntimeError naming the equation.
"""

import string

from . import _kiln as _C

__all__ = ["einsum"]


def _fail(equation, why):
    raise RuntimeError(f"[einsum] {why} in equation {equation!r}")


def _parse(equation, operands):
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->")
    else:
        lhs, out = eq, None
    terms = lhs.split(",")
    if len(terms) != len(operands):
        _fail(equation, f"{len(terms)} operand subscripts for {len(operands)} operands")
    spare = [c for c in string.ascii_uppercase + string.ascii_lowercase if c not in eq]
    ell_rank = 0
    for term, x in zip(terms, operands):
        if "..." in term:
            ell_rank = max(ell_rank, x.ndim - (len(term) - 3))
    ell = "".join(spare[:ell_rank])
    expanded = []
    for term, x in zip(terms, operands):
        if term.count("...") > 1 or any(c not in string.ascii_letters for c in
                                        term.replace("...", "")):
            _fail(equation, f"bad subscripts {term!r}")
        if "..." in term:
            n = x.ndim - (len(term) - 3)
            term = term.replace("...", ell[ell_rank - n:] if n > 0 else "")
        if len(term) != x.ndim:
            _fail(equation, f"subscripts {term!r} for an operand of rank {x.ndim}")
        expanded.append(term)
    if out is None:
        counts = {}
        for term in expanded:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c in counts if counts[c] == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
        if len(set(out)) != len(out):
            _fail(equation, "a letter repeats in the output")
        for c in out:
            if not any(c in term for term in expanded):
                _fail(equation, f"output letter {c!r} appears in no operand")
    return expanded, out


def _diagonal(equation, x, term):
    """Takes the diagonal of one repeated letter (the first found) of a single operand."""
    for c in term:
        if term.count(c) == 2:
            i, j = term.index(c), term.rindex(c)
            rest = [d for d in range(x.ndim) if d not in (i, j)]
            n = x.shape[i]
            if x.shape[j] != n:
                _fail(equation, f"letter {c!r} has sizes {n} and {x.shape[j]}")
            moved = x.permute(rest + [i, j])
            lead = list(moved.shape[:-2])
            flat = moved.reshape(lead + [n * n])
            diag = _C.slice(flat, len(lead), 0, n * n, n + 1)
            return diag, "".join(term[d] for d in rest) + c
        if term.count(c) > 2:
            break
    _fail(equation, f"a letter repeats more than twice or more than once in {term!r}")


def _sum_away(x, term, keep):
    dims = [d for d, c in enumerate(term) if c not in keep]
    if not dims:
        return x, term
    return x.sum(dims), "".join(c for c in term if c in keep)


def _size(x, term, c):
    return x.shape[term.index(c)] if c in term else 1


def _contract(equation, a, ta, b, tb, keep):
    """a (letters ta) times b (tb), keeping the letters in keep; returns (tensor, letters)."""
    a, ta = _sum_away(a, ta, set(tb) | keep)
    b, tb = _sum_away(b, tb, set(ta) | keep)
    batch = [c for c in ta if c in tb and c in keep]
    contracted = [c for c in ta if c in tb and c not in keep]
    only_a = [c for c in ta if c not in tb]
    only_b = [c for c in tb if c not in ta]
    sizes = {}
    for c in batch + contracted:
        sa, sb = _size(a, ta, c), _size(b, tb, c)
        if sa != sb and 1 not in (sa, sb):
            _fail(equation, f"letter {c!r} has sizes {sa} and {sb}")
        sizes[c] = max(sa, sb)
    a = a.permute([ta.index(c) for c in batch + only_a + contracted])
    b = b.permute([tb.index(c) for c in batch + contracted + only_b])
    a = a.expand([sizes[c] for c in batch] + list(a.shape[len(batch):len(batch) + len(only_a)])
                 + [sizes[c] for c in contracted])
    b = b.expand([sizes[c] for c in batch + contracted]
                 + list(b.shape[len(batch) + len(contracted):]))
    bs = [sizes[c] for c in batch]
    m = [a.shape[len(batch) + i] for i in range(len(only_a))]
    n = [b.shape[len(batch) + len(contracted) + i] for i in range(len(only_b))]
    k = 1
    for c in contracted:
        k *= sizes[c]
    mm, nn = 1, 1
    for s in m:
        mm *= s
    for s in n:
        nn *= s
    y = _C.matmul(a.reshape(bs + [mm, k]), b.reshape(bs + [k, nn]))
    return y.reshape(bs + m + n), "".join(batch + only_a + only_b)


def einsum(equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        _fail(equation, "no operands")
    terms, out = _parse(equation, operands)
    xs = list(operands)
    for i, (x, term) in enumerate(zip(xs, terms)):
        if len(set(term)) != len(term):
            if len(xs) > 1:
                _fail(equation, f"a repeated letter inside operand {i} ({term!r}) of several "
                                "operands is not supported")
            while len(set(term)) != len(term):
                x, term = _diagonal(equation, x, term)
            xs[i], terms[i] = x, term
    y, ty = xs[0], terms[0]
    for i in range(1, len(xs)):
        later = set(out).union(*terms[i + 1:]) if i + 1 < len(xs) else set(out)
        y, ty = _contract(equation, y, ty, xs[i], terms[i], later)
    y, ty = _sum_away(y, ty, set(out))
    if ty == out:
        return y
    return y.permute([ty.index(c) for c in out])
