"""multinomial (by its statistics: a loose chi-square bound, distinct draws without
replacement, reproducible under kiln.manual_seed and a kiln.Generator), nonzero and
masked_select against torch 1.13 (values, gradients, graph breaks with their reason in a
traced loop), and einsum against torch on the common equations, with its errors."""

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, torch

TOL = dict(rtol=1e-10, atol=1e-12)


def test_multinomial_frequencies_and_reproducibility():
    p = np.array([0.1, 0.0, 0.4, 0.2, 0.3])
    draws = 20000
    got = kiln.multinomial(k(p * 3).float(), draws, replacement=True).numpy()
    count = np.bincount(got, minlength=5)
    assert count[1] == 0
    nz = p > 0
    chi2 = (((count - draws * p) ** 2)[nz] / (draws * p[nz])).sum()
    assert chi2 < 30, (chi2, count)  # 3 degrees of freedom
    kiln.manual_seed(3)
    a = kiln.multinomial(k(p), 4).numpy()
    kiln.manual_seed(3)
    assert (kiln.multinomial(k(p), 4).numpy() == a).all()
    g1, g2 = kiln.Generator().manual_seed(5), kiln.Generator().manual_seed(5)
    assert (k(p).multinomial(3, generator=g1).numpy() ==
            k(p).multinomial(3, generator=g2).numpy()).all()


def test_multinomial_without_replacement_is_distinct(rng):
    p = rng.uniform(0.1, 1.0, size=(20, 12))
    p[:, 3] = 0
    got = kiln.multinomial(k(p), 11).numpy()
    assert got.shape == (20, 11) and got.dtype == np.int64
    for row in got:
        assert len(set(row)) == 11 and 3 not in row


@requires_torch
@pytest.mark.parametrize("probs, n, replacement", [
    ([0.5, float("nan")], 1, False), ([0.5, -1.0], 1, True), ([0.0, 0.0], 1, True),
    ([1.0, 1.0], 3, False),
])
def test_multinomial_bad_input_is_a_runtime_error(probs, n, replacement):
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor(probs), n, replacement)
    with pytest.raises(RuntimeError, match=r"\[multinomial\]"):
        kiln.multinomial(kiln.tensor(probs), n, replacement)


@requires_torch
def test_nonzero_and_masked_select_match_torch(rng):
    x = rng.standard_normal((4, 5, 3))
    x[rng.uniform(size=x.shape) < 0.4] = 0
    assert_close(kiln.nonzero(k(x)), torch.nonzero(t(x)))
    for a, b in zip(k(x).nonzero(as_tuple=True), torch.nonzero(t(x), as_tuple=True)):
        assert_close(a, b)
    assert_close(kiln.argwhere(k(x)), torch.argwhere(t(x)))
    mask = rng.uniform(size=(5, 1)) < 0.5  # broadcasts
    xk, xt = k(x).requires_grad_(True), t(x).requires_grad_(True)
    yk, yt = kiln.masked_select(xk, k(mask)), torch.masked_select(xt, t(mask))
    assert_close(yk, yt.detach(), **TOL)
    w = rng.standard_normal(tuple(yt.shape))
    (yk * k(w)).sum().backward()
    (yt * t(w)).sum().backward()
    assert_close(xk.grad, xt.grad, **TOL)
    with pytest.raises(TypeError):
        kiln.masked_select(k(x), k(x))  # the mask must be bool (torch: RuntimeError)


def test_nonzero_in_a_traced_loop_breaks_with_its_reason(rng):
    kiln.reset()
    for _ in range(6):
        x = rng.standard_normal((6, 4)).astype(np.float32)
        with kiln.region("nonzero_loop"):
            y = k(x) * 2
            picked = kiln.masked_select(y, y > 0.5)
            z = picked * 3 + 1
        v = x * 2
        np.testing.assert_allclose(z.numpy(), v[v > 0.5] * 3 + 1, rtol=1e-6)
    report = kiln.explain()
    assert any(b["kind"] == "DataDependentShape"
               and "masked_select's output shape depends on its input's values" in b["reason"]
               for b in report.graph_breaks), str(report)
    with pytest.raises(kiln.GraphBreakError, match="nonzero"):
        with kiln.region("full", fullgraph=True):
            kiln.nonzero(k(x) * 2)


@requires_torch
@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    ("ij,kj", [(3, 4), (5, 4)]),
    ("i,i->", [(4,), (4,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->ji", [(3, 4)]),
    ("ij->i", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("bii->bi", [(2, 3, 3)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("bi,i->b", [(3, 4), (4,)]),
])
def test_einsum_matches_torch(rng, equation, shapes):
    arrays = [rng.standard_normal(s) for s in shapes]
    ks = [k(a).requires_grad_(True) for a in arrays]
    ts = [t(a).requires_grad_(True) for a in arrays]
    yk, yt = kiln.einsum(equation, *ks), torch.einsum(equation, *ts)
    assert_close(yk, yt.detach(), rtol=1e-10, atol=1e-10)
    w = rng.standard_normal(tuple(yt.shape))
    (yk * k(w)).sum().backward()
    (yt * t(w)).sum().backward()
    for a, b in zip(ks, ts):
        assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-10)
    assert_close(kiln.einsum(equation, [x.detach() for x in ks]), yt.detach(), rtol=1e-10,
                 atol=1e-10)


@pytest.mark.parametrize("equation, shapes, match", [
    ("ij,jk->ik", [(3, 4)], "operand"),
    ("ij,jk->ik", [(3, 4), (5, 6)], "sizes"),
    ("ii,ij->j", [(3, 3), (3, 4)], "repeated"),
    ("ij->ii", [(3, 3)], "repeats in the output"),
    ("ijk->i", [(3, 3)], "rank"),
    ("ij->k", [(3, 3)], "no operand"),
])
def test_einsum_errors_are_clear(equation, shapes, match):
    with pytest.raises(RuntimeError, match=match):
        kiln.einsum(equation, *[kiln.ones(*s) for s in shapes])
