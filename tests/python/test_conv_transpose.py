"""nn.ConvTranspose1d/2d and F.conv_transpose1d/2d, and grouped (depthwise included)
Conv1d/Conv2d, against torch 1.13 on fresh random inputs and copied weights: values and
gradients (input, weight, bias) over strides, padding, output_padding, groups,
output_size, unbatched inputs; the errors."""

import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, torch

pytestmark = requires_torch
TOL = dict(rtol=1e-9, atol=1e-10)

CASES_2D = [
    dict(cin=3, cout=4, k=3),
    dict(cin=2, cout=5, k=(3, 2), stride=2),
    dict(cin=4, cout=6, k=4, stride=2, padding=1),
    dict(cin=3, cout=2, k=3, stride=3, padding=1, output_padding=2),
    dict(cin=4, cout=6, k=3, stride=2, groups=2, output_padding=1),
    dict(cin=2, cout=3, k=1, bias=False),
]


def _copy(km, tm):
    with torch.no_grad():
        tm.weight.copy_(torch.from_numpy(km.weight.detach().numpy()))
        if km.bias is not None:
            tm.bias.copy_(torch.from_numpy(km.bias.detach().numpy()))


def _run(rng, kmod, tmod, xshape, call=lambda m, x: m(x)):
    x = rng.standard_normal(xshape)
    xk, xt = k(x).requires_grad_(True), t(x).requires_grad_(True)
    yk, yt = call(kmod, xk), call(tmod, xt)
    assert_close(yk, yt.detach(), **TOL)
    w = rng.standard_normal(tuple(yt.shape))
    (yk * k(w)).sum().backward()
    (yt * t(w)).sum().backward()
    assert_close(xk.grad, xt.grad, **TOL)
    assert_close(kmod.weight.grad, tmod.weight.grad, **TOL)
    if kmod.bias is not None:
        assert_close(kmod.bias.grad, tmod.bias.grad, **TOL)


@pytest.mark.parametrize("case", CASES_2D, ids=str)
@pytest.mark.parametrize("batched", [True, False])
def test_conv_transpose2d(rng, case, batched):
    c = dict(case)
    cin, cout, ks = c.pop("cin"), c.pop("cout"), c.pop("k")
    km = kiln.nn.ConvTranspose2d(cin, cout, ks, **c).double()
    tm = torch.nn.ConvTranspose2d(cin, cout, ks, **c).double()
    assert km.weight.shape == tuple(tm.weight.shape)
    _copy(km, tm)
    shape = (cin, 5, 4) if not batched else (2, cin, 5, 4)
    _run(rng, km, tm, shape)


@pytest.mark.parametrize("case", [dict(k=3), dict(k=4, stride=2, padding=1, output_padding=1),
                                  dict(k=3, stride=2, groups=2)], ids=str)
def test_conv_transpose1d(rng, case):
    km = kiln.nn.ConvTranspose1d(4, 6, case["k"], **{a: b for a, b in case.items() if a != "k"})
    tm = torch.nn.ConvTranspose1d(4, 6, case["k"], **{a: b for a, b in case.items() if a != "k"})
    km, tm = km.double(), tm.double()
    _copy(km, tm)
    _run(rng, km, tm, (3, 4, 7))


def test_output_size_and_init_scale(rng):
    km = kiln.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1).double()
    tm = torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1).double()
    _copy(km, tm)
    _run(rng, km, tm, (1, 3, 4, 5), call=lambda m, x: m(x, output_size=[8, 10]))
    # PyTorch's init bound: 1/sqrt(fan_in), fan_in = weight.shape[1] * kh * kw
    big = kiln.nn.ConvTranspose2d(64, 8, 3)
    bound = 1 / (8 * 9) ** 0.5
    assert big.weight.abs().max().item() <= bound + 1e-7
    assert big.weight.abs().max().item() > 0.8 * bound
    assert big.bias.abs().max().item() <= bound + 1e-7


def test_functional_matches(rng):
    x, w, b = (rng.standard_normal(s) for s in ((2, 4, 3, 3), (4, 3, 2, 2), (6,)))
    got = kiln.nn.functional.conv_transpose2d(k(x), k(w), k(b), stride=2, groups=2)
    want = torch.nn.functional.conv_transpose2d(t(x), t(w), t(b), stride=2, groups=2)
    assert_close(got, want, **TOL)


GROUPED = [
    ("Conv2d", dict(cin=4, cout=6, k=3, groups=2, padding=1)),
    ("Conv2d", dict(cin=6, cout=6, k=3, groups=6, stride=2)),  # depthwise
    ("Conv2d", dict(cin=4, cout=8, k=(3, 1), groups=4, bias=False, padding_mode="reflect",
                    padding=1)),
    ("Conv1d", dict(cin=6, cout=3, k=3, groups=3, padding="same")),
]


@pytest.mark.parametrize("name,case", GROUPED, ids=str)
def test_grouped_conv(rng, name, case):
    c = dict(case)
    cin, cout, ks = c.pop("cin"), c.pop("cout"), c.pop("k")
    km = getattr(kiln.nn, name)(cin, cout, ks, **c).double()
    tm = getattr(torch.nn, name)(cin, cout, ks, **c).double()
    assert km.weight.shape == tuple(tm.weight.shape)
    _copy(km, tm)
    _run(rng, km, tm, (2, cin, 7, 6) if name == "Conv2d" else (2, cin, 9))
    _run(rng, km, tm, (cin, 5, 6) if name == "Conv2d" else (cin, 8))  # unbatched


@pytest.mark.parametrize("build", [
    lambda lib: lib.nn.functional.conv2d(lib.zeros(1, 4, 5, 5), lib.zeros(6, 3, 3, 3), groups=2),
    lambda lib: lib.nn.functional.conv2d(lib.zeros(1, 4, 5, 5), lib.zeros(5, 2, 3, 3), groups=2),
    lambda lib: lib.nn.Conv2d(4, 4, 3, groups=0),
    lambda lib: lib.nn.Conv2d(4, 6, 3, groups=4),
])
def test_grouped_conv_errors_match_torch_types(build):
    with pytest.raises(Exception) as et:
        build(torch)
    with pytest.raises(type(et.value)):
        build(kiln)


@pytest.mark.parametrize("build", [
    lambda lib: lib.nn.functional.conv_transpose2d(lib.zeros(1, 2, 3), lib.zeros(2, 3, 2, 2)),
    lambda lib: lib.nn.functional.conv_transpose2d(lib.zeros(1, 3, 4, 4), lib.zeros(2, 3, 2, 2)),
    lambda lib: lib.nn.functional.conv_transpose2d(lib.zeros(1, 2, 4, 4), lib.zeros(2, 3, 2, 2),
                                                   stride=2, output_padding=2),
    lambda lib: lib.nn.ConvTranspose2d(3, 4, 3, groups=2),
    lambda lib: lib.nn.ConvTranspose2d(2, 2, 3, stride=2)(lib.zeros(1, 2, 3, 3),
                                                           output_size=(20, 20)),
])
def test_errors_match_torch_types(build):
    with pytest.raises(Exception) as et:
        build(torch)
    with pytest.raises(type(et.value)) as ek:
        build(kiln)
    assert "conv_transpose" in str(ek.value).lower() or "ConvTranspose" in str(ek.value) \
        or "output size" in str(ek.value)
