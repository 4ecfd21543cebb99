"""kiln.nn BatchNorm1d/2d, GroupNorm, InstanceNorm1d/2d and RMSNorm against torch.nn
(RMSNorm against its formula in torch float64, torch 1.13 has none) on copied weights:
outputs, gradients of input and affine parameters, and the running statistics over
several training steps (momentum, momentum=None's cumulative average, unbiased running
variance, num_batches_tracked), eval mode, state_dict keys; PyTorch's error types."""

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, torch

pytestmark = requires_torch

TOL = {"float64": dict(rtol=1e-9, atol=1e-10), "float32": dict(rtol=1e-4, atol=1e-5)}


def make_pair(cls, args, kwargs, dtype, rng):
    tm = getattr(torch.nn, cls)(*args, **kwargs).to(getattr(torch, dtype))
    with torch.no_grad():  # non-trivial affine parameters
        for p in tm.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape))))
    km = getattr(kiln.nn, cls)(*args, **kwargs, dtype=getattr(kiln, dtype))
    assert list(km.state_dict().keys()) == list(tm.state_dict().keys())
    km.load_state_dict(tm.state_dict())
    return tm, km


def step_and_compare(rng, km, tm, shape, dtype, tol):
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    xk, xt = k(x).requires_grad_(True), t(x).requires_grad_(True)
    yk, yt = km(xk), tm(xt)
    assert_close(yk, yt.detach(), **tol)
    w = rng.standard_normal(shape).astype(dtype)
    (yk * k(w)).sum().backward()
    (yt * t(w)).sum().backward()
    assert_close(xk.grad, xt.grad, **tol)
    tparams = dict(tm.named_parameters())
    for name, p in km.named_parameters():
        assert_close(p.grad, tparams[name].grad, **tol)
        p.grad = None
        tparams[name].grad = None
    tbufs = dict(tm.named_buffers())
    for name, b in km.named_buffers():
        assert_close(b, tbufs[name], **tol)


BN_CASES = [
    ("BatchNorm1d", (4,), dict(), (8, 4)),
    ("BatchNorm1d", (4,), dict(momentum=0.3), (5, 4, 7)),
    ("BatchNorm1d", (4,), dict(momentum=None), (6, 4)),
    ("BatchNorm1d", (4,), dict(affine=False), (6, 4, 3)),
    ("BatchNorm1d", (4,), dict(track_running_stats=False), (6, 4)),
    ("BatchNorm2d", (3,), dict(), (4, 3, 5, 6)),
    ("BatchNorm2d", (3,), dict(momentum=None, eps=1e-3), (2, 3, 4, 4)),
    ("BatchNorm2d", (3,), dict(affine=False, track_running_stats=False), (2, 3, 4, 5)),
    ("GroupNorm", (2, 6), dict(), (3, 6, 5)),
    ("GroupNorm", (3, 6), dict(eps=1e-3), (2, 6, 4, 4)),
    ("GroupNorm", (1, 4), dict(affine=False), (3, 4)),
    ("InstanceNorm1d", (4,), dict(), (3, 4, 7)),
    ("InstanceNorm1d", (4,), dict(affine=True, track_running_stats=True), (3, 4, 7)),
    ("InstanceNorm2d", (3,), dict(), (2, 3, 5, 4)),
    ("InstanceNorm2d", (3,), dict(affine=True, track_running_stats=True, momentum=0.25),
     (2, 3, 4, 6)),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("cls,args,kwargs,shape", BN_CASES)
def test_norm_layer_matches_torch_train_then_eval(rng, cls, args, kwargs, shape, dtype):
    tm, km = make_pair(cls, args, kwargs, dtype, rng)
    tol = TOL[dtype]
    for _ in range(3):  # running statistics accumulate over steps
        step_and_compare(rng, km, tm, shape, dtype, tol)
    km.eval()
    tm.eval()
    step_and_compare(rng, km, tm, shape, dtype, tol)


def test_instance_norm_unbatched(rng):
    tm, km = make_pair("InstanceNorm1d", (4,), dict(), "float64", rng)
    x = rng.standard_normal((4, 9))
    assert_close(km(k(x)), tm(t(x)), **TOL["float64"])


def test_batchnorm_num_batches_tracked_and_eval_only_reads(rng):
    km = kiln.nn.BatchNorm1d(3)
    assert km.num_batches_tracked.dtype == kiln.int64
    for _ in range(4):
        km(k(rng.standard_normal((5, 3)).astype(np.float32)))
    assert km.num_batches_tracked.item() == 4
    km.eval()
    before = km.running_mean.numpy().copy()
    km(k(rng.standard_normal((5, 3)).astype(np.float32)))
    np.testing.assert_array_equal(km.running_mean.numpy(), before)
    assert km.num_batches_tracked.item() == 4


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape,normalized,eps,affine", [
    ((3, 8), (8,), None, True), ((2, 3, 4, 5), (4, 5), 1e-4, True),
    ((5, 6), 6, 1e-6, False)])
def test_rms_norm_matches_formula(rng, shape, normalized, eps, affine, dtype):
    m = kiln.nn.RMSNorm(normalized, eps=eps, elementwise_affine=affine,
                        dtype=getattr(kiln, dtype))
    nd = 1 if isinstance(normalized, int) else len(normalized)
    if affine:
        w = rng.standard_normal(tuple(m.weight.shape)).astype(dtype)
        m.load_state_dict({"weight": w})
    x = rng.standard_normal(shape).astype(dtype)
    xk = k(x).requires_grad_(True)
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_(True)
    e = np.finfo(dtype).eps if eps is None else eps
    dims = tuple(range(len(shape) - nd, len(shape)))
    yt = xt * torch.rsqrt((xt * xt).mean(dims, keepdim=True) + e)
    if affine:
        yt = yt * torch.from_numpy(w.astype(np.float64))
    yk = m(xk)
    assert_close(yk, yt.detach(), check_dtype=False, **TOL[dtype])
    g = rng.standard_normal(shape)
    (yk * k(g.astype(dtype))).sum().backward()
    (yt * torch.from_numpy(g)).sum().backward()
    assert_close(xk.grad, xt.grad, check_dtype=False, **TOL[dtype])


@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, 0), (3.0, -1), (float("inf"), 1)])
def test_functional_normalize(rng, p, dim):
    x = rng.standard_normal((4, 5))
    xk, xt = k(x).requires_grad_(True), t(x).requires_grad_(True)
    yk = kiln.nn.functional.normalize(xk, p=p, dim=dim)
    yt = torch.nn.functional.normalize(xt, p=p, dim=dim)
    assert_close(yk, yt.detach(), **TOL["float64"])
    g = rng.standard_normal((4, 5))
    (yk * k(g)).sum().backward()
    (yt * t(g)).sum().backward()
    assert_close(xk.grad, xt.grad, **TOL["float64"])


@pytest.mark.parametrize("build", [
    lambda lib: lib.nn.BatchNorm2d(3)(lib.zeros(2, 3, 4)),
    lambda lib: lib.nn.BatchNorm1d(3)(lib.zeros(2, 3, 4, 4)),
    lambda lib: lib.nn.BatchNorm1d(3)(lib.zeros(1, 3)),
    lambda lib: lib.nn.GroupNorm(4, 6),
    lambda lib: lib.nn.InstanceNorm2d(3)(lib.zeros(2, 3)),
    lambda lib: lib.nn.InstanceNorm1d(3, momentum=None)(lib.zeros(2, 3, 4)),
])
def test_norm_errors_match_torch_types(build):
    with pytest.raises(Exception) as et:
        build(torch)
    with pytest.raises(et.type):
        build(kiln)
