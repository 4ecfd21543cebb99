"""kiln.nn layers and functions added for PyTorch programs, against torch 1.13 on fresh
random inputs and copied weights (values and gradients): activations, Conv1d and the
padding modes, F.pad, interpolate / Upsample, PixelShuffle, Dropout1d/2d, Unflatten,
AdaptiveAvgPool1d/2d, NLL/L1/SmoothL1/Huber/KLDiv/BCE losses, nn.init (orthogonal_,
trunc_normal_, eye_, dirac_, sparse_), ParameterList / ParameterDict, forward hooks
(backward hooks: test_hooks.py)."""

import math

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, to_np, torch

pytestmark = requires_torch

TOL = {"float64": dict(rtol=1e-9, atol=1e-12), "float32": dict(rtol=1e-5, atol=1e-6)}


def check(rng, kfn, tfn, shape, dtype="float64", scale=3.0, tol=None, extra=None):
    """kfn(x) against tfn(x) and d(sum(w * f(x)))/dx on a fresh input."""
    tol = tol or TOL[dtype]
    x = (rng.standard_normal(shape) * scale).astype(dtype)
    if extra is not None:
        x = extra(x)
    xk, xt = k(x).requires_grad_(True), t(x).requires_grad_(True)
    yk, yt = kfn(xk), tfn(xt)
    assert_close(yk, yt.detach(), **tol)
    w = rng.standard_normal(tuple(yt.shape)).astype(dtype)
    (yk * k(w)).sum().backward()
    (yt * t(w)).sum().backward()
    assert_close(xk.grad, xt.grad, **tol)


ACTIVATIONS = [
    ("LeakyReLU", dict()), ("LeakyReLU", dict(negative_slope=0.2)), ("ELU", dict()),
    ("ELU", dict(alpha=0.5)), ("SELU", dict()), ("CELU", dict(alpha=1.5)),
    ("Softplus", dict()), ("Softplus", dict(beta=2.0, threshold=5.0)), ("Hardtanh", dict()),
    ("Hardtanh", dict(min_val=-2.0, max_val=0.5)), ("ReLU6", dict()), ("Hardsigmoid", dict()),
    ("Hardswish", dict()), ("Mish", dict()), ("LogSigmoid", dict()), ("Softsign", dict()),
    ("Tanhshrink", dict()), ("GLU", dict()), ("GLU", dict(dim=1)), ("Threshold", (0.3, -1.0)),
    ("Hardshrink", dict()), ("Softshrink", dict(lambd=0.7)), ("Softmin", dict(dim=1)),
    ("PReLU", dict()), ("PReLU", dict(num_parameters=4, init=0.1)),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name,kwargs", ACTIVATIONS)
def test_activation_modules_match_torch(rng, name, kwargs, dtype):
    args, kw = (kwargs, {}) if isinstance(kwargs, tuple) else ((), kwargs)
    km = getattr(kiln.nn, name)(*args, **kw)
    tm = getattr(torch.nn, name)(*args, **kw).to(getattr(torch, dtype))
    km.to(getattr(kiln, dtype))
    km.load_state_dict(tm.state_dict())
    tol = TOL[dtype]
    if name == "Hardsigmoid" and dtype == "float64":
        # torch's backward multiplies by a float32 1/6, also in float64
        tol = dict(rtol=1e-7, atol=1e-12)
    check(rng, km, tm, (3, 4, 6), dtype, tol=tol)
    for kp, tp in zip(km.parameters(), tm.parameters()):  # PReLU's weight
        assert_close(kp.grad, tp.grad, **TOL[dtype])


def test_activations_near_zero_and_large(rng):
    near = lambda x: x * 1e-6  # noqa: E731  (expm1 / log1p accuracy near 0)
    for name in ("elu", "selu", "celu", "softplus", "logsigmoid", "mish"):
        kf, tf = getattr(kiln.nn.functional, name), getattr(torch.nn.functional, name)
        check(rng, kf, tf, (50,), "float64", extra=near, tol=dict(rtol=1e-9, atol=1e-15))
        check(rng, kf, tf, (50,), "float32", scale=30.0, tol=dict(rtol=1e-5, atol=1e-6))


@pytest.mark.parametrize("kwargs,shape", [
    (dict(kernel_size=3), (2, 3, 9)), (dict(kernel_size=4, stride=2, padding=1), (2, 3, 10)),
    (dict(kernel_size=5, padding="same"), (1, 3, 8)),
    (dict(kernel_size=3, padding="valid"), (3, 7)),
    (dict(kernel_size=3, padding=2, padding_mode="reflect"), (2, 3, 6)),
    (dict(kernel_size=3, padding=1, padding_mode="replicate", bias=False), (2, 3, 6)),
    (dict(kernel_size=3, padding=2, padding_mode="circular"), (2, 3, 6))])
def test_conv1d_matches_torch(rng, kwargs, shape):
    tm = torch.nn.Conv1d(3, 5, **kwargs).double()
    km = kiln.nn.Conv1d(3, 5, **kwargs, dtype=kiln.float64)
    km.load_state_dict(tm.state_dict())
    check(rng, km, tm, shape)
    assert_close(km.weight.grad, tm.weight.grad, **TOL["float64"])


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv2d_padding_modes_match_torch(rng, mode):
    tm = torch.nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode).double()
    km = kiln.nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode, dtype=kiln.float64)
    km.load_state_dict(tm.state_dict())
    check(rng, km, tm, (2, 2, 5, 6))


@pytest.mark.parametrize("pad,mode", [
    ((1, 2), "constant"), ((2, 0, 1, 3), "constant"), ((-1, 2), "constant"),
    ((2, 1, 1, 2), "reflect"), ((3, 1, 0, 2), "replicate"), ((2, 2, 1, 0), "circular")])
def test_pad_matches_torch(rng, pad, mode):
    check(rng, lambda x: kiln.nn.functional.pad(x, pad, mode),
          lambda x: torch.nn.functional.pad(x, pad, mode), (2, 3, 4, 5))
    if mode == "constant":
        check(rng, lambda x: kiln.nn.functional.pad(x, pad, value=1.5),
              lambda x: torch.nn.functional.pad(x, pad, value=1.5), (2, 4, 5))


@pytest.mark.parametrize("kwargs,shape", [
    (dict(scale_factor=2, mode="nearest"), (2, 3, 4, 5)),
    (dict(size=(7, 3), mode="nearest"), (2, 3, 4, 5)),
    (dict(scale_factor=1.7, mode="nearest"), (1, 2, 5, 6)),
    (dict(scale_factor=2, mode="bilinear", align_corners=False), (2, 3, 4, 5)),
    (dict(size=(9, 4), mode="bilinear", align_corners=True), (2, 2, 4, 5)),
    (dict(size=(3, 7), mode="bilinear", align_corners=False), (1, 2, 6, 5)),
    (dict(scale_factor=3, mode="linear"), (2, 3, 5)),
    (dict(size=11, mode="nearest"), (2, 3, 4))])
def test_interpolate_matches_torch(rng, kwargs, shape):
    check(rng, lambda x: kiln.nn.functional.interpolate(x, **kwargs),
          lambda x: torch.nn.functional.interpolate(x, **kwargs), shape)
    km, tm = kiln.nn.Upsample(**kwargs), torch.nn.Upsample(**kwargs)
    check(rng, km, tm, shape)


@pytest.mark.parametrize("r,shape", [(2, (2, 8, 3, 4)), (3, (9, 2, 2)), (2, (1, 2, 4, 3, 5))])
def test_pixel_shuffle_matches_torch(rng, r, shape):
    check(rng, kiln.nn.PixelShuffle(r), torch.nn.PixelShuffle(r), shape)
    un_shape = shape[:-3] + (shape[-3] // (r * r), shape[-2] * r, shape[-1] * r)
    check(rng, kiln.nn.PixelUnshuffle(r), torch.nn.PixelUnshuffle(r), un_shape)


@pytest.mark.filterwarnings("ignore:dropout2d")
@pytest.mark.parametrize("cls,shape,group", [("Dropout1d", (4, 16, 9), 9),
                                             ("Dropout2d", (4, 16, 3, 3), 9),
                                             ("Dropout2d", (16, 5, 3), 3)])
def test_channel_dropout(rng, cls, shape, group):
    """Whole channels (PyTorch's: for 3-D input Dropout2d drops (N, C) rows) zeroed."""
    m = getattr(kiln.nn, cls)(p=0.4)
    x = rng.standard_normal(shape).astype(np.float32) + 5.0
    y = m(k(x)).numpy()
    per = y.reshape(-1, group)
    xs = x.reshape(per.shape)
    zero = np.all(per == 0, axis=1)
    np.testing.assert_allclose(per[~zero], xs[~zero] / 0.6, rtol=1e-6)  # scaled survivors
    assert 0 < zero.mean() < 1
    m.eval()
    np.testing.assert_array_equal(m(k(x)).numpy(), x)
    with pytest.raises(RuntimeError):
        getattr(torch.nn, cls)()(torch.zeros(2))
    with pytest.raises(RuntimeError):
        m.train()(kiln.zeros(2))


def test_unflatten_matches_torch(rng):
    check(rng, kiln.nn.Unflatten(1, (2, 3)), torch.nn.Unflatten(1, (2, 3)), (4, 6, 5))
    check(rng, kiln.nn.Unflatten(-1, (-1, 5)), torch.nn.Unflatten(-1, (-1, 5)), (4, 10))


@pytest.mark.parametrize("out,shape", [((2, 3), (2, 3, 6, 9)), ((5, 4), (2, 3, 7, 9)),
                                       (1, (2, 3, 5, 5)), ((None, 2), (2, 2, 5, 7)),
                                       (3, (3, 7, 8))])
def test_adaptive_avg_pool2d_matches_torch(rng, out, shape):
    check(rng, kiln.nn.AdaptiveAvgPool2d(out), torch.nn.AdaptiveAvgPool2d(out), shape)


def test_adaptive_avg_pool1d_matches_torch(rng):
    check(rng, kiln.nn.AdaptiveAvgPool1d(4), torch.nn.AdaptiveAvgPool1d(4), (2, 3, 11))


LOSSES = [
    ("L1Loss", dict()), ("L1Loss", dict(reduction="sum")), ("SmoothL1Loss", dict()),
    ("SmoothL1Loss", dict(beta=0.5, reduction="none")), ("SmoothL1Loss", dict(beta=0.0)),
    ("HuberLoss", dict(delta=0.7)), ("KLDivLoss", dict(reduction="batchmean")),
    ("KLDivLoss", dict(reduction="sum", log_target=True)), ("BCELoss", dict()),
    ("NLLLoss", dict()), ("NLLLoss", dict(reduction="sum", ignore_index=1)),
]


@pytest.mark.parametrize("name,kwargs", LOSSES)
def test_losses_match_torch(rng, name, kwargs):
    km, tm = getattr(kiln.nn, name)(**kwargs), getattr(torch.nn, name)(**kwargs)
    if name == "NLLLoss":
        target = rng.integers(0, 4, 6)
        extra = lambda x: np.log(np.exp(x) / np.exp(x).sum(1, keepdims=True))  # noqa: E731
        check(rng, lambda x: km(x, k(target)), lambda x: tm(x, t(target)), (6, 4), extra=extra)
        return
    if name == "KLDivLoss":
        p = rng.dirichlet(np.ones(5), 4)
        target = np.log(p) if kwargs.get("log_target") else p
        extra = lambda x: np.log(np.exp(x) / np.exp(x).sum(1, keepdims=True))  # noqa: E731
        check(rng, lambda x: km(x, k(target)), lambda x: tm(x, t(target)), (4, 5), extra=extra)
        return
    if name == "BCELoss":
        target = rng.random((4, 5))
        sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
        check(rng, lambda x: km(x, k(target)), lambda x: tm(x, t(target)), (4, 5), extra=sig)
        return
    target = rng.standard_normal((4, 5))
    check(rng, lambda x: km(x, k(target)), lambda x: tm(x, t(target)), (4, 5), scale=1.5)


def test_orthogonal_and_friends():
    kiln.manual_seed(0)
    for shape in [(6, 6), (4, 9), (9, 4), (5, 2, 3)]:
        w = kiln.empty(shape)
        kiln.nn.init.orthogonal_(w, gain=2.0)
        m = w.numpy().reshape(shape[0], -1)
        gram = m @ m.T if shape[0] <= m.shape[1] else m.T @ m
        np.testing.assert_allclose(gram, 4.0 * np.eye(gram.shape[0]), atol=1e-5)
    e = kiln.empty(3, 5)
    kiln.nn.init.eye_(e)
    np.testing.assert_array_equal(e.numpy(), torch.nn.init.eye_(torch.empty(3, 5)).numpy())
    for shape, groups in [((4, 4, 3, 3), 1), ((6, 3, 5), 2), ((2, 3, 3, 3, 3), 1)]:
        d = kiln.empty(shape)
        kiln.nn.init.dirac_(d, groups)
        np.testing.assert_array_equal(d.numpy(),
                                      torch.nn.init.dirac_(torch.empty(shape), groups).numpy())
    s = kiln.empty(10, 6)
    kiln.nn.init.sparse_(s, 0.3)
    assert all((s.numpy()[:, c] == 0).sum() >= 3 for c in range(6))
    with pytest.raises(ValueError):
        kiln.nn.init.orthogonal_(kiln.empty(3))


def test_trunc_normal_distribution():
    kiln.manual_seed(1)
    w = kiln.empty(200000, dtype=kiln.float64)
    kiln.nn.init.trunc_normal_(w, mean=0.5, std=2.0, a=-1.0, b=3.0)
    v = w.numpy()
    assert v.min() >= -1.0 and v.max() <= 3.0
    ref = torch.nn.init.trunc_normal_(torch.empty(200000, dtype=torch.float64), 0.5, 2.0,
                                      -1.0, 3.0).numpy()
    assert abs(v.mean() - ref.mean()) < 0.02 and abs(v.std() - ref.std()) < 0.02
    hist_k = np.histogram(v, bins=8, range=(-1, 3))[0] / v.size
    hist_t = np.histogram(ref, bins=8, range=(-1, 3))[0] / ref.size
    np.testing.assert_allclose(hist_k, hist_t, atol=0.01)


def test_kaiming_fan_out_std():
    kiln.manual_seed(2)
    w = kiln.empty(400, 300)
    kiln.nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert abs(w.numpy().std() - math.sqrt(2.0 / 400)) < 0.002


def test_parameter_list_and_dict_state_dicts_match_torch(rng):
    class Net:
        def __init__(self, lib):
            nn = lib.nn
            self.m = nn.Module()
            self.m.plist = nn.ParameterList([nn.Parameter(lib.zeros(2, 3)) for _ in range(3)])
            self.m.pdict = nn.ParameterDict({"a": nn.Parameter(lib.zeros(4)),
                                             "b": nn.Parameter(lib.zeros(1, 2))})

    km, tm = Net(kiln).m, Net(torch).m
    assert list(km.state_dict()) == list(tm.state_dict())
    km.load_state_dict({n: torch.from_numpy(rng.standard_normal(tuple(v.shape)).astype(np.float32))
                        for n, v in tm.state_dict().items()})
    assert len(list(km.parameters())) == 5 and len(km.plist) == 3 and "a" in km.pdict
    km.plist.append(kiln.nn.Parameter(kiln.ones(1)))
    assert "plist.3" in km.state_dict()
    opt = kiln.optim.SGD(km.parameters(), lr=0.1)
    (km.plist[0].sum() + km.pdict["a"].sum()).backward()
    before = to_np(km.pdict["a"]).copy()
    opt.step()
    np.testing.assert_allclose(to_np(km.pdict["a"]), before - 0.1, rtol=1e-6)


def test_forward_hooks():
    m = kiln.nn.Linear(3, 2)
    seen = []
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 0,))
    h2 = m.register_forward_hook(lambda mod, args, out: seen.append(out.shape) or out + 1)
    y = m(kiln.randn(4, 3))
    np.testing.assert_allclose(y.numpy(), (m.bias + 1).expand(4, 2).detach().numpy(), rtol=1e-6)
    assert seen == [(4, 2)]
    h1.remove()
    h2.remove()
    x = kiln.randn(4, 3)
    np.testing.assert_allclose(m(x).detach().numpy(), (x @ m.weight.t() + m.bias).detach().numpy(),
                               rtol=1e-6)


@pytest.mark.parametrize("build", [
    lambda lib: lib.nn.functional.pad(lib.zeros(2, 3), (1,)),
    lambda lib: lib.nn.functional.pad(lib.zeros(1, 2, 3), (3, 3), mode="reflect"),
    lambda lib: lib.nn.functional.interpolate(lib.zeros(1, 1, 3, 3)),
    lambda lib: lib.nn.PixelShuffle(2)(lib.zeros(1, 3, 2, 2)),
    lambda lib: lib.nn.functional.glu(lib.zeros(3, 5)),
    lambda lib: lib.nn.Conv1d(2, 3, 3, padding="full"),
    lambda lib: lib.nn.SmoothL1Loss(beta=-1.0)(lib.zeros(2), lib.zeros(2)),
    lambda lib: lib.nn.PReLU(3)(lib.zeros(2, 4)),
])
def test_errors_match_torch_types(build):
    with pytest.raises(Exception) as et:
        build(torch)
    with pytest.raises(et.type):
        build(kiln)
