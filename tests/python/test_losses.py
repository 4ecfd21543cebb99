"""Losses of kiln.nn.functional (and their modules) against PyTorch: values and the
gradients of their inputs, for every reduction and option (class weights,
ignore_index, label_smoothing, probability targets, pos_weight)."""

import numpy as np
import pytest

import kiln
import kiln.nn.functional as KF
from helpers import assert_close, k, requires_torch, t, torch

pytestmark = requires_torch

if torch is not None:
    import torch.nn.functional as TF

REDUCTIONS = ["none", "sum", "mean"]
TOL = {"float64": dict(rtol=1e-9, atol=1e-11), "float32": dict(rtol=1e-4, atol=1e-5)}
NP = {"float64": np.float64, "float32": np.float32}


def run_both(rng, dtype, kfn, tfn, grad_args, other_args):
    """loss(grad_args..., other_args...) in kiln and torch; grad_args require grad.
    Compares the values and, after backward with a random upstream gradient, the
    gradients of grad_args."""
    tol = TOL[dtype]

    def conv(a, lib):
        if isinstance(a, np.ndarray):
            if a.dtype.kind == "f":
                a = a.astype(NP[dtype])
            return k(a) if lib == "kiln" else t(a)
        return a

    kx = [conv(a, "kiln").requires_grad_() for a in grad_args]
    tx = [conv(a, "torch").requires_grad_() for a in grad_args]
    kout = kfn(*kx, *[conv(a, "kiln") for a in other_args])
    tout = tfn(*tx, *[conv(a, "torch") for a in other_args])
    assert_close(kout, tout, **tol)
    g = rng.standard_normal(tuple(tout.shape)).astype(NP[dtype])
    kout.backward(k(g))
    tout.backward(t(g))
    for a, b in zip(kx, tx):
        assert a.grad is not None
        assert_close(a.grad, b.grad, **tol)
    return kout, tout


def logits(rng, *shape):
    return rng.standard_normal(shape) * 2


def targets(rng, n_classes, shape, ignore=None):
    tg = rng.integers(0, n_classes, shape)
    if ignore is not None:
        tg.reshape(-1)[::3] = ignore
    return tg


# ---- cross_entropy

CE_SHAPES = [((6, 5), (6,)), ((2, 4, 3, 2), (2, 3, 2)), ((5,), ())]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shapes", CE_SHAPES, ids=str)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 1])
def test_cross_entropy(rng, shapes, reduction, weighted, ignore, dtype):
    xs, ts = shapes
    c = xs[0] if len(xs) == 1 else xs[1]
    x = logits(rng, *xs)
    tg = targets(rng, c, ts, ignore)
    if ignore is not None and ts == ():
        tg = np.array(ignore)
    w = np.abs(rng.standard_normal(c)) + 0.1 if weighted else None
    kw = {"reduction": reduction}
    if ignore is not None:
        kw["ignore_index"] = ignore
    other = [tg] + ([w] if weighted else [])
    if ts == () and reduction == "mean" and ignore is not None:
        # the only target is ignored: the mean is 0/0 = nan in both
        kx = k(x.astype(NP[dtype])).requires_grad_()
        other = [a.astype(NP[dtype]) if a.dtype.kind == "f" else a for a in other]
        kout = KF.cross_entropy(kx, *[k(a) for a in other], **kw)
        tout = TF.cross_entropy(t(x.astype(NP[dtype])), *[t(a) for a in other], **kw)
        assert np.isnan(tout.item()) and np.isnan(kout.item())
        return
    run_both(rng, dtype, lambda x, tg, *w: KF.cross_entropy(x, tg, *w, **kw),
             lambda x, tg, *w: TF.cross_entropy(x, tg, *w, **kw), [x], other)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 2])
def test_cross_entropy_label_smoothing(rng, reduction, weighted, ignore, dtype):
    x = logits(rng, 7, 4)
    tg = targets(rng, 4, (7,), ignore)
    w = np.abs(rng.standard_normal(4)) + 0.1 if weighted else None
    kw = {"reduction": reduction, "label_smoothing": 0.2}
    if ignore is not None:
        kw["ignore_index"] = ignore
    run_both(rng, dtype, lambda x, tg, w: KF.cross_entropy(x, tg, w, **kw),
             lambda x, tg, w: TF.cross_entropy(x, tg, w, **kw), [x], [tg, w])


def test_cross_entropy_label_smoothing_spatial(rng):
    x = logits(rng, 2, 3, 4, 5)
    tg = targets(rng, 3, (2, 4, 5), ignore=0)
    for reduction in REDUCTIONS:
        kw = dict(reduction=reduction, label_smoothing=0.3, ignore_index=0)
        run_both(rng, "float64", lambda x, tg: KF.cross_entropy(x, tg, **kw),
                 lambda x, tg: TF.cross_entropy(x, tg, **kw), [x], [tg])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_probability_targets(rng, reduction, weighted, smoothing):
    x = logits(rng, 6, 5)
    p = rng.random((6, 5))
    p /= p.sum(1, keepdims=True)
    w = np.abs(rng.standard_normal(5)) + 0.1 if weighted else None
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    run_both(rng, "float64", lambda x, p, w: KF.cross_entropy(x, p, w, **kw),
             lambda x, p, w: TF.cross_entropy(x, p, w, **kw), [x], [p, w])
    # gradient with respect to the soft targets too
    run_both(rng, "float64", lambda x, p: KF.cross_entropy(x, p, **kw),
             lambda x, p: TF.cross_entropy(x, p, **kw), [x, p], [])


def test_cross_entropy_loss_module(rng):
    x = logits(rng, 8, 6)
    tg = targets(rng, 6, (8,), ignore=-100)
    w = np.abs(rng.standard_normal(6)) + 0.1
    km = kiln.nn.CrossEntropyLoss(weight=k(w), label_smoothing=0.05)
    tm = torch.nn.CrossEntropyLoss(weight=t(w), label_smoothing=0.05)
    run_both(rng, "float64", km, tm, [x], [tg])


# ---- nll_loss

@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shapes", [((6, 5), (6,)), ((2, 4, 3), (2, 3))], ids=str)
def test_nll_loss(rng, shapes, reduction, weighted, dtype):
    xs, ts = shapes
    c = xs[1]
    x = logits(rng, *xs)
    tg = targets(rng, c, ts, ignore=3)
    w = np.abs(rng.standard_normal(c)) + 0.1 if weighted else None
    kw = dict(reduction=reduction, ignore_index=3)
    run_both(rng, dtype, lambda x, tg, w: KF.nll_loss(KF.log_softmax(x, dim=1), tg, w, **kw),
             lambda x, tg, w: TF.nll_loss(TF.log_softmax(x, dim=1), tg, w, **kw), [x], [tg, w])
    # on raw scores (not log-probabilities): the gradient is just -w at the target
    run_both(rng, dtype, lambda x, tg, w: KF.nll_loss(x, tg, w, **kw),
             lambda x, tg, w: TF.nll_loss(x, tg, w, **kw), [x], [tg, w])


def test_nll_loss_rejects_float_targets(rng):
    with pytest.raises((TypeError, RuntimeError, ValueError)):
        KF.nll_loss(k(logits(rng, 3, 4)), k(rng.random(3)))


# ---- mse_loss

@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_loss(rng, reduction, dtype):
    x, y = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    run_both(rng, dtype, lambda x, y: KF.mse_loss(x, y, reduction=reduction),
             lambda x, y: TF.mse_loss(x, y, reduction=reduction), [x, y], [])
    run_both(rng, dtype, kiln.nn.MSELoss(reduction=reduction),
             torch.nn.MSELoss(reduction=reduction), [x], [y])


def test_mse_loss_broadcast_target(rng):
    x, y = rng.standard_normal((4, 5)), rng.standard_normal(5)
    with pytest.warns(UserWarning):  # torch warns about the broadcast; the values agree
        run_both(rng, "float64", KF.mse_loss, TF.mse_loss, [x, y], [])


# ---- binary cross entropy

@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pos_weighted", [False, True])
def test_bce_with_logits(rng, reduction, weighted, pos_weighted, dtype):
    x = logits(rng, 6, 4) * 3
    y = rng.random((6, 4))
    y[0] = (y[0] > 0.5).astype(float)
    w = rng.random((6, 4)) + 0.5 if weighted else None
    pw = rng.random(4) * 3 + 0.1 if pos_weighted else None
    run_both(rng, dtype,
             lambda x, y, w, pw: KF.binary_cross_entropy_with_logits(
                 x, y, w, reduction=reduction, pos_weight=pw),
             lambda x, y, w, pw: TF.binary_cross_entropy_with_logits(
                 x, y, w, reduction=reduction, pos_weight=pw), [x], [y, w, pw])
    # gradient with respect to the target too
    run_both(rng, dtype,
             lambda x, y: KF.binary_cross_entropy_with_logits(x, y, reduction=reduction),
             lambda x, y: TF.binary_cross_entropy_with_logits(x, y, reduction=reduction),
             [x, y], [])


def test_bce_with_logits_extreme_logits_stable(rng):
    x = np.array([-200.0, -30.0, 0.0, 30.0, 200.0])
    y = np.array([1.0, 0.0, 0.5, 1.0, 0.0])
    for dtype in ("float32", "float64"):
        kout, _ = run_both(rng, dtype, lambda x, y: KF.binary_cross_entropy_with_logits(
            x, y, reduction="none"), lambda x, y: TF.binary_cross_entropy_with_logits(
            x, y, reduction="none"), [x], [y])
        assert np.isfinite(kout.detach().numpy()).all()
    pw = np.array([2.0, 2.0, 2.0, 2.0, 2.0])
    run_both(rng, "float64", lambda x, y, pw: KF.binary_cross_entropy_with_logits(
        x, y, pos_weight=pw), lambda x, y, pw: TF.binary_cross_entropy_with_logits(
        x, y, pos_weight=pw), [x], [y, pw])


def test_bce_with_logits_module(rng):
    x, y = logits(rng, 5, 3), rng.random((5, 3))
    pw = rng.random(3) + 0.5
    run_both(rng, "float64", kiln.nn.BCEWithLogitsLoss(pos_weight=k(pw)),
             torch.nn.BCEWithLogitsLoss(pos_weight=t(pw)), [x], [y])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(rng, reduction, weighted, dtype):
    p = rng.random((5, 4)) * 0.9 + 0.05
    y = rng.random((5, 4))
    w = rng.random((5, 4)) + 0.5 if weighted else None
    run_both(rng, dtype, lambda p, y, w: KF.binary_cross_entropy(p, y, w, reduction=reduction),
             lambda p, y, w: TF.binary_cross_entropy(p, y, w, reduction=reduction), [p], [y, w])
    # through a sigmoid, as used in practice
    x = logits(rng, 5, 4)
    run_both(rng, dtype,
             lambda x, y: KF.binary_cross_entropy(kiln.sigmoid(x), y, reduction=reduction),
             lambda x, y: TF.binary_cross_entropy(torch.sigmoid(x), y, reduction=reduction),
             [x], [y])


def test_binary_cross_entropy_clamps_log_like_torch(rng):
    p = np.array([0.0, 1.0, 0.3, 1.0])
    y = np.array([0.0, 1.0, 1.0, 0.0])
    kout = KF.binary_cross_entropy(k(p), k(y), reduction="none")
    tout = TF.binary_cross_entropy(t(p), t(y), reduction="none")
    assert_close(kout, tout)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_every_target_ignored(rng, dtype, weighted, smoothing):
    # the mean over no targets: nan in both, and a zero gradient (PyTorch never writes
    # the ignored rows; 0 * inf would be nan). Found by the ASan run's random targets.
    x = logits(rng, 6, 5).astype(NP[dtype])
    tg = np.full(6, 2)
    w = (np.abs(rng.standard_normal(5)) + 0.1).astype(NP[dtype])
    kw = dict(ignore_index=2, label_smoothing=smoothing)
    kx, tx = k(x).requires_grad_(), t(x).requires_grad_()
    kout = KF.cross_entropy(kx, k(tg), *([k(w)] if weighted else []), **kw)
    tout = TF.cross_entropy(tx, t(tg), *([t(w)] if weighted else []), **kw)
    assert np.isnan(kout.item()) and np.isnan(tout.item())
    kout.backward()
    tout.backward()
    assert_close(kx.grad, tx.grad, **TOL[dtype])
    assert not np.isnan(kx.grad.numpy()).any()
