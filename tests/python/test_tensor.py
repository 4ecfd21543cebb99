"""kiln.Tensor in PyTorch spelling: creation, metadata, host values, operators
(reflected, in place, comparisons), dtype conversions, views and repr, against
PyTorch CPU and numpy."""

import operator

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, randn, requires_torch, t, to_np, torch

# ---- creation and metadata


def test_tensor_from_nested_lists():
    x = kiln.tensor([[1, 2, 3], [4, 5, 6]])
    assert x.dtype == kiln.int64 and x.shape == (2, 3) and x.ndim == 2
    assert x.tolist() == [[1, 2, 3], [4, 5, 6]]
    y = kiln.tensor([[1.5, 2], [3, 4]])
    assert y.dtype == kiln.float32 and y.tolist() == [[1.5, 2.0], [3.0, 4.0]]
    z = kiln.tensor([True, False])
    assert z.dtype == kiln.bool and z.tolist() == [True, False]
    assert kiln.tensor([]).shape == (0,) and kiln.tensor([]).dtype == kiln.float32
    assert kiln.tensor([[1, 2]], dtype=kiln.float64).dtype == kiln.float64
    assert kiln.tensor([1, 2], dtype=kiln.float16).tolist() == [1.0, 2.0]


def test_tensor_from_scalars():
    for value, dtype in [(3, kiln.int64), (2.5, kiln.float32), (True, kiln.bool)]:
        x = kiln.tensor(value)
        assert x.ndim == 0 and x.shape == () and x.dtype == dtype and x.item() == value
    assert kiln.tensor(np.float64(1.25)).dtype == kiln.float64


def test_tensor_from_numpy_copies(rng):
    a = randn(rng, 3, 4)
    x = kiln.tensor(a)
    a[0, 0] = 100.0
    assert x[0, 0].item() != 100.0
    assert kiln.tensor(a.astype(np.int16)).dtype == kiln.int64
    assert kiln.tensor(a[:, ::2]).tolist() == a[:, ::2].tolist()


def test_tensor_from_tensor_and_list_of_tensors():
    x = kiln.tensor([1.0, 2.0])
    y = kiln.tensor(x)
    y[0] = 5.0
    assert x.tolist() == [1.0, 2.0]
    assert kiln.tensor([kiln.tensor(1.0), kiln.tensor(2.0)]).tolist() == [1.0, 2.0]


def test_tensor_ragged_and_bad_elements():
    with pytest.raises(ValueError, match="expected sequence of length 2 at dim 1"):
        kiln.tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        kiln.tensor(["a"])
    with pytest.raises(TypeError):
        kiln.tensor([object()])


def test_shape_size_stride_numel():
    x = kiln.zeros(2, 3, 4)
    assert isinstance(x.shape, kiln.Size) and isinstance(x.shape, tuple)
    assert x.shape == (2, 3, 4) and x.size() == (2, 3, 4) and x.size(-1) == 4
    assert repr(x.shape) == "kiln.Size([2, 3, 4])"
    assert x.shape[1:] == (3, 4) and isinstance(x.shape[1:], kiln.Size)
    assert x.shape.numel() == 24 == x.numel() == x.nelement()
    assert x.stride() == (12, 4, 1) and x.stride(0) == 12
    assert x.dim() == x.ndim == 3
    assert x.element_size() == 4 and x.itemsize == 4 and x.nbytes == 96
    assert x.is_contiguous() and not x.transpose(0, 1).is_contiguous()
    assert len(x) == 2
    with pytest.raises(IndexError):
        x.size(3)


def test_dtype_objects():
    assert kiln.float32 is kiln.float and kiln.float64 is kiln.double
    assert kiln.float16 is kiln.half and kiln.int64 is kiln.long and kiln.int32 is kiln.int
    x = kiln.zeros(2)
    assert x.dtype == kiln.float32 and x.dtype is kiln.float32 and x.dtype != kiln.int32
    assert repr(kiln.bfloat16) == "kiln.bfloat16" and str(kiln.bool) == "kiln.bool"
    sizes = {kiln.bool: 1, kiln.int32: 4, kiln.int64: 8, kiln.float16: 2,
             kiln.bfloat16: 2, kiln.float32: 4, kiln.float64: 8}
    for d, size in sizes.items():
        assert d.itemsize == size
    assert kiln.float16.is_floating_point and not kiln.int32.is_floating_point
    assert len({kiln.float32, kiln.float32, kiln.int64}) == 2
    assert kiln.zeros(2, dtype=float).dtype == kiln.float64
    assert kiln.zeros(2, dtype=int).dtype == kiln.int64
    assert kiln.zeros(2, dtype=bool).dtype == kiln.bool
    import pickle
    assert pickle.loads(pickle.dumps(kiln.float16)) is kiln.float16


def test_device_objects():
    cpu = kiln.device("cpu")
    assert cpu.type == "cpu" and cpu.index is None and str(cpu) == "cpu"
    assert repr(cpu) == "device(type='cpu')"
    assert kiln.zeros(1).device == cpu and kiln.zeros(1).device == "cpu"
    cuda1 = kiln.device("cuda:1")
    assert cuda1.type == "cuda" and cuda1.index == 1 and str(cuda1) == "cuda:1"
    assert kiln.device("cuda", 1) == cuda1 and kiln.device("cuda") == kiln.device("cuda:0")
    assert repr(cuda1) == "device(type='cuda', index=1)"
    assert len({kiln.device("cpu"), kiln.device("cpu")}) == 1
    with pytest.raises(ValueError):
        kiln.device("tpu")
    assert kiln.zeros(1).is_cpu and not kiln.zeros(1).is_cuda


# ---- host values


def test_item_and_python_numbers():
    assert kiln.tensor(2.5).item() == 2.5 and isinstance(kiln.tensor(2.5).item(), float)
    assert kiln.tensor([7]).item() == 7 and isinstance(kiln.tensor([7]).item(), int)
    assert kiln.tensor(True).item() is True
    assert float(kiln.tensor([[1.5]])) == 1.5 and int(kiln.tensor(3.9)) == 3
    assert int(kiln.tensor(-3.9)) == -3
    assert [10, 20, 30][kiln.tensor(1)] == 20  # __index__
    with pytest.raises(TypeError):
        [1, 2][kiln.tensor(1.0)]
    with pytest.raises(ValueError, match="only one element tensors"):
        kiln.zeros(2).item()
    with pytest.raises(ValueError):
        float(kiln.zeros(2))


def test_bool():
    assert bool(kiln.tensor([1.0])) and not bool(kiln.tensor(0))
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        bool(kiln.zeros(2))
    with pytest.raises(RuntimeError, match="no values"):
        bool(kiln.zeros(0))
    assert kiln.zeros(1) is not None  # comparing with None does not raise
    assert (kiln.zeros(1) == None) is False  # noqa: E711


def test_tolist_dtypes(rng):
    a = randn(rng, 2, 3, 2)
    assert kiln.tensor(a).tolist() == a.tolist()
    assert kiln.tensor(a.astype(np.float64)).tolist() == a.astype(np.float64).tolist()
    ai = rng.integers(-100, 100, (4, 2)).astype(np.int32)
    assert kiln.tensor(ai).tolist() == ai.tolist()
    assert kiln.tensor(2.0).tolist() == 2.0
    assert kiln.zeros(0, 3).tolist() == []


def test_len_iter(rng):
    a = randn(rng, 3, 2)
    x = kiln.tensor(a)
    rows = list(x)
    assert len(rows) == 3 and all(r.shape == (2,) for r in rows)
    np.testing.assert_array_equal(np.stack([to_np(r) for r in rows]), a)
    assert [r.tolist() for r in reversed(x)] == a[::-1].tolist()
    with pytest.raises(TypeError):
        len(kiln.tensor(1.0))
    with pytest.raises(TypeError):
        iter(kiln.tensor(1.0))
    assert 2.0 in kiln.tensor([1.0, 2.0]) and 5 not in kiln.tensor([1, 2])


def test_format():
    assert f"{kiln.tensor(3.14159):.2f}" == "3.14"


# ---- operators

ARITH = [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow]
COMPARE = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]


@requires_torch
@pytest.mark.parametrize("op", ARITH + COMPARE, ids=lambda o: o.__name__)
@pytest.mark.parametrize("da,db", [(np.float32, np.float32), (np.int64, np.float32),
                                   (np.int32, np.int32), (np.float64, np.int32)])
def test_operators_tensor_tensor(rng, op, da, db):
    a = (rng.standard_normal((3, 4)) * 4).astype(da)
    b = (rng.standard_normal((1, 4)) * 4).astype(db)
    if op is operator.pow:
        a, b = np.abs(a) + 1, (np.abs(b) % 3).astype(db)
    if op is operator.truediv:
        b[b == 0] = 1
    assert_close(op(k(a), k(b)), op(t(a), t(b)), rtol=1e-5, atol=1e-5)


@requires_torch
@pytest.mark.parametrize("op", ARITH + COMPARE, ids=lambda o: o.__name__)
@pytest.mark.parametrize("scalar", [3, -2, 0.5, True, np.float32(1.5), np.int64(2)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_operators_with_scalars_both_sides(rng, op, scalar, dtype):
    a = (rng.standard_normal((2, 5)) * 4).astype(dtype)
    if op is operator.pow:
        a = np.abs(a) + 1
        if isinstance(scalar, (bool, np.bool_)) or scalar < 0:
            pytest.skip("integer base to a negative power")
    if op is operator.truediv:
        a[a == 0] = 1
    py = scalar.item() if isinstance(scalar, np.generic) else scalar
    try:
        expected, expected_left = op(t(a), py), op(py, t(a))
    except RuntimeError as e:  # torch refuses `x - True`
        pytest.skip(str(e))
    assert_close(op(k(a), scalar), expected, rtol=1e-5, atol=1e-5)
    assert_close(op(scalar, k(a)), expected_left, rtol=1e-5, atol=1e-5)


@requires_torch
def test_unary_operators_and_matmul(rng):
    a, b = randn(rng, 3, 4), randn(rng, 4, 2)
    assert_close(-k(a), -t(a))
    assert_close(+k(a), t(a))
    assert_close(abs(k(a)), abs(t(a)))
    assert_close(k(a) @ k(b), t(a) @ t(b), rtol=1e-5)
    assert_close(k(a).T, t(a).T)
    assert_close(t(a).__rmatmul__(t(b).T) if False else k(b).T @ k(a).T, t(b).T @ t(a).T,
                 rtol=1e-5)


@requires_torch
def test_bool_operators(rng):
    a, b = rng.random((3, 4)) > 0.5, rng.random((3, 4)) > 0.5
    assert_close(k(a) & k(b), t(a) & t(b))
    assert_close(k(a) | k(b), t(a) | t(b))
    assert_close(k(a) ^ k(b), t(a) ^ t(b))
    assert_close(~k(a), ~t(a))
    assert_close(k(a) & True, t(a) & True)
    with pytest.raises(TypeError):
        k(randn(rng, 2)) & k(randn(rng, 2))


@requires_torch
@pytest.mark.parametrize("name,op", [("add_", operator.iadd), ("sub_", operator.isub),
                                     ("mul_", operator.imul), ("div_", operator.itruediv)])
def test_inplace_operators_keep_identity(rng, name, op):
    a, b = randn(rng, 3, 4), randn(rng, 1, 4) + 3
    x = k(a)
    view = x[1]
    y = op(x, k(b))
    assert y is x
    assert_close(x, op(t(a), t(b)))
    assert_close(view, op(t(a), t(b))[1])  # the view sees the write
    x2 = k(a)
    assert getattr(x2, name)(2.5) is x2
    assert_close(x2, getattr(t(a), name)(2.5))
    x3 = k(a)
    assert getattr(x3, name)(k(b)) is x3
    assert_close(x3, getattr(t(a), name)(t(b)))


@requires_torch
def test_inplace_methods(rng):
    a = randn(rng, 4, 5)
    x = k(a)
    assert x.zero_() is x and to_np(x).sum() == 0
    assert x.fill_(2.5) is x and np.all(to_np(x) == 2.5)
    x.fill_(kiln.tensor(1.5))
    assert np.all(to_np(x) == 1.5)
    b = randn(rng, 1, 5)
    assert x.copy_(k(b)) is x
    assert_close(x, t(b).expand(4, 5))
    x = k(a)
    assert x.clamp_(-0.5, 0.5) is x
    assert_close(x, t(a).clamp(-0.5, 0.5))
    x = k(a)
    x.clamp_(min=0.1)
    assert_close(x, t(a).clamp(min=0.1))
    x = k(a)
    assert x.relu_() is x
    assert_close(x, t(a).relu())
    x = k(a)
    x.exp_()
    assert_close(x, t(a).exp())
    x = k(a)
    x.sigmoid_().neg_()
    assert_close(x, -t(a).sigmoid())
    x = k(a)
    x.masked_fill_(k(a > 0), -1.0)
    assert_close(x, t(a).masked_fill(t(a > 0), -1.0))
    # in place through a view writes the base
    x = k(a)
    x[:, 1].mul_(0)
    assert np.all(to_np(x)[:, 1] == 0)


def test_inplace_into_int_from_float_rounds_like_torch():
    x = kiln.tensor([1, 2, 3], dtype=kiln.int32)
    x.copy_(kiln.tensor([1.7, -2.2, 3.0]))
    assert x.tolist() == [1, -2, 3] and x.dtype == kiln.int32


# ---- dtype conversions

CONVERSIONS = ["float", "double", "half", "bfloat16", "long", "int", "bool"]


@requires_torch
@pytest.mark.parametrize("method", CONVERSIONS)
@pytest.mark.parametrize("src", [np.float32, np.float64, np.int32, np.int64, np.bool_])
def test_conversion_methods(rng, method, src):
    a = (rng.standard_normal((3, 7)) * 50).astype(src)
    got = getattr(k(a), method)()
    expected = getattr(t(a), method)()
    assert_close(got, expected, rtol=1e-2 if method in ("half", "bfloat16") else 0, atol=0)


@requires_torch
def test_to_spellings(rng):
    a = randn(rng, 2, 3)
    x = k(a)
    assert x.to("cpu") is x or x.to("cpu").device == kiln.device("cpu")
    assert x.to(kiln.float64).dtype == kiln.float64
    assert x.to(dtype=kiln.int32).dtype == kiln.int32
    assert x.to("cpu", kiln.float16).dtype == kiln.float16
    assert x.to(device="cpu", dtype=kiln.bfloat16).dtype == kiln.bfloat16
    other = kiln.zeros(1, dtype=kiln.float64)
    assert x.to(other).dtype == kiln.float64
    assert x.to(torch.device("cpu")).device.type == "cpu"
    assert x.to(kiln.device("cpu")).dtype == kiln.float32
    y = x.to(kiln.float32, copy=True)
    y[0, 0] = 99
    assert x[0, 0].item() != 99
    assert x.type(kiln.float64).dtype == kiln.float64 and x.type() == "kiln.float32"
    assert x.cpu().device.type == "cpu"
    with pytest.raises(TypeError):
        x.to(3.5)
    with pytest.raises(TypeError):
        x.to(bogus=1)


def test_detach_clone_contiguous(rng):
    a = randn(rng, 3, 4)
    x = k(a)
    d = x.detach()
    d[0, 0] = 42.0
    assert x[0, 0].item() == 42.0  # detach shares storage
    c = x.clone()
    c[0, 1] = -1.0
    assert x[0, 1].item() != -1.0
    tr = x.t()
    assert not tr.is_contiguous() and tr.contiguous().is_contiguous()
    np.testing.assert_array_equal(to_np(tr.contiguous()), to_np(x).T)
    assert x.contiguous().data_ptr() == x.data_ptr()


# ---- views


@requires_torch
def test_view_methods(rng):
    a = randn(rng, 2, 3, 4)
    x, y = k(a), t(a)
    cases = [
        (x.view(6, 4), y.view(6, 4)), (x.view((4, 6)), y.view((4, 6))),
        (x.view(-1), y.view(-1)), (x.reshape(3, -1), y.reshape(3, -1)),
        (x.reshape([24]), y.reshape([24])), (x.transpose(0, 2), y.transpose(0, 2)),
        (x.permute(2, 0, 1), y.permute(2, 0, 1)), (x.permute((1, 2, 0)), y.permute((1, 2, 0))),
        (x.T, y.permute(2, 1, 0)), (x.mT, y.transpose(-2, -1)),
        (x[:, :1].expand(2, 5, 4), y[:, :1].expand(2, 5, 4)),
        (x[:, :1].expand(-1, 3, -1), y[:, :1].expand(-1, 3, -1)),
        (x.unsqueeze(1), y.unsqueeze(1)), (x.unsqueeze(-1), y.unsqueeze(-1)),
        (x[:, :1].squeeze(), y[:, :1].squeeze()), (x[:, :1].squeeze(1), y[:, :1].squeeze(1)),
        (x.squeeze(0), y.squeeze(0)), (x.flatten(), y.flatten()), (x.flatten(1), y.flatten(1)),
        (x.flatten(0, 1), y.flatten(0, 1)), (x.narrow(2, 1, 2), y.narrow(2, 1, 2)),
        (x.select(1, 2), y.select(1, 2)), (x.swapaxes(0, 1), y.swapaxes(0, 1)),
        (x.view_as(k(a.reshape(4, 6))), y.view(4, 6)),
        (x.reshape_as(k(a.reshape(24))), y.reshape(24)),
        (x[:1].expand_as(k(a)), y[:1].expand_as(y)),
        (x.unflatten(2, (2, 2)), y.unflatten(2, (2, 2))),
        (x.movedim(0, -1), y.movedim(0, -1)),
        (x.repeat(2, 1, 3), y.repeat(2, 1, 3)), (x[0].repeat(2, 2, 1), y[0].repeat(2, 2, 1)),
        (x.t() if x.ndim == 2 else x[0].t(), y[0].t()),
    ]
    for got, expected in cases:
        assert_close(got, expected)


def test_views_share_storage(rng):
    a = randn(rng, 4, 6)
    x = k(a)
    for v in (x.view(24), x.transpose(0, 1), x[1:3], x.unsqueeze(0), x.narrow(1, 2, 2),
              x.select(0, 1), x[:, None].expand(4, 3, 6)):
        assert v._shares_storage(x)
    x.view(24)[5] = 123.0
    assert x[0, 5].item() == 123.0


# ---- repr (PyTorch's format, with kiln. instead of torch.)


@requires_torch
@pytest.mark.parametrize("make", [
    lambda: np.array([1.0, 2.0, 3.0], np.float32),
    lambda: np.array([[0.1234567, -1.5], [2.0, 300.0]], np.float32),
    lambda: np.array([1e-6, 1.0, 1e5], np.float32),
    lambda: np.array([[1, -22], [333, 4]], np.int64),
    lambda: np.array([[1, 2]], np.int32),
    lambda: np.array([True, False]),
    lambda: np.array(3.5, np.float32),
    lambda: np.array([1.5, 2.5], np.float64),
    lambda: np.array([1.0, 2.5], np.float16),
    lambda: np.array([np.nan, np.inf, -np.inf, 1.0], np.float32),
    lambda: np.zeros((0,), np.float32),
    lambda: np.zeros((2, 0), np.float32),
    lambda: np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7,
    lambda: np.arange(3000, dtype=np.float32).reshape(30, 100),
    lambda: np.arange(40, dtype=np.float32) * 1.5,
])
def test_repr_matches_torch(make):
    a = make()
    expected = repr(torch.from_numpy(a)).replace("torch.", "kiln.")
    assert repr(kiln.tensor(a)) == expected
    assert str(kiln.tensor(a)) == expected


@requires_torch
def test_more_pytorch_spellings(rng):
    a = randn(rng, 4, 5)
    x, y = k(a), t(a)
    for d in (-1, 0, 2):
        assert_close(x.triu(d), y.triu(d))
        assert_close(kiln.tril(x, d), torch.tril(y, d))
    assert_close(kiln.ones(3, 3, dtype=kiln.bool).triu(1), torch.ones(3, 3, dtype=torch.bool).triu(1))
    m = a > 0.3
    assert_close(x.masked_fill(k(m), -5.0), y.masked_fill(t(m), -5.0))
    assert_close(x.where(k(m), 0.0), y.where(t(m), torch.tensor(0.0)))
    assert_close(x.new_zeros(2, 3), y.new_zeros(2, 3))
    assert_close(x.new_ones((2,)), y.new_ones((2,)))
    assert_close(x.new_full((2, 2), 3.0), y.new_full((2, 2), 3.0))
    assert_close(x.new_tensor([1, 2]), y.new_tensor([1, 2]))
    assert x.new_empty(3).shape == (3,) and x.is_floating_point()
    assert_close(kiln.movedim(x, 1, 0), torch.movedim(y, 1, 0))
    assert x.data.data_ptr() == x.data_ptr() and x.data.requires_grad is False
    assert x.requires_grad is False and x.grad is None and x.is_leaf
    with kiln.no_grad():
        assert_close(x * 2, y * 2)


def test_site_provider_names_user_code():
    site = kiln._C._current_site()
    assert site is not None and site[0].endswith("test_tensor.py")
    assert site[2] == "test_site_provider_names_user_code"
