"""Zero-copy interop: numpy (__array_interface__ / from_numpy) and DLPack (PyTorch, numpy,
kiln itself), writes showing through both ways, and lifetimes (views and arrays that
outlive the object they came from)."""

import gc
import sys

import numpy as np
import pytest

import kiln
from helpers import k, randn, requires_torch, to_np, torch

NP_DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.bool_]


def sample(rng, shape, dtype):
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    return (rng.standard_normal(shape) * 10).astype(dtype)


# ---- numpy


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_numpy_from_tensor_is_zero_copy(rng, dtype):
    x = k(sample(rng, (3, 4), dtype))
    a = x.numpy()
    assert a.dtype == dtype and a.shape == (3, 4)
    assert a.__array_interface__["data"][0] == x.data_ptr()
    a[1, 2] = a[0, 0] if dtype == np.bool_ else 9
    assert x[1, 2].item() == a[1, 2]
    x[0, 1] = 1
    assert a[0, 1] == 1
    np.testing.assert_array_equal(np.asarray(x), a)


def test_numpy_of_strided_views(rng):
    a = randn(rng, 4, 6)
    x = k(a)
    for view, expected in [(x.t(), a.T), (x[:, 1::2], a[:, 1::2]), (x[2], a[2]),
                           (x[:, :1].expand(4, 3), np.broadcast_to(a[:, :1], (4, 3))),
                           (x.unsqueeze(0)[..., 3], a[None, :, 3])]:
        arr = view.numpy()
        np.testing.assert_array_equal(arr, expected)
        assert np.shares_memory(arr, x.numpy())


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_from_numpy_shares_memory(rng, dtype):
    a = sample(rng, (5, 3), dtype)
    x = kiln.from_numpy(a)
    assert x.dtype.name == np.dtype(dtype).name.replace("bool", "bool")
    assert x.data_ptr() == a.ctypes.data
    np.testing.assert_array_equal(to_np(x), a)
    a[2, 1] = a[0, 0] if dtype == np.bool_ else 5
    assert x[2, 1].item() == a[2, 1]
    x[4, 0] = 1
    assert a[4, 0] == 1


def test_from_numpy_strided_and_empty(rng):
    a = randn(rng, 6, 8)
    for arr in (a[::2, 1::3], a.T, a[3], np.zeros((0, 4), np.float32),
                np.full((), 3.0, np.float32)):
        x = kiln.from_numpy(arr)
        assert x.shape == arr.shape
        np.testing.assert_array_equal(to_np(x), arr)
    x = kiln.from_numpy(a[::2, 1::3])
    x.fill_(0.0)
    assert np.all(a[::2, 1::3] == 0) and np.any(a != 0)


def test_from_numpy_errors():
    with pytest.raises(TypeError):
        kiln.from_numpy([1, 2, 3])
    with pytest.raises(TypeError, match="unsupported numpy dtype"):
        kiln.from_numpy(np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="negative strides"):
        kiln.from_numpy(np.arange(4.0)[::-1])
    with pytest.raises(TypeError, match="bfloat16"):
        kiln.zeros(2, dtype=kiln.bfloat16).numpy()


def test_lifetime_tensor_outlives_array(rng):
    a = randn(rng, 1000)
    expected = a.copy()
    x = kiln.from_numpy(a)
    view = x[10:20]
    base = sys.getrefcount(a)
    del a
    gc.collect()
    np.testing.assert_array_equal(to_np(x), expected)
    del x
    gc.collect()
    np.testing.assert_array_equal(to_np(view), expected[10:20])
    assert base > 2  # the storage held a reference


def test_lifetime_array_outlives_tensor(rng):
    x = k(randn(rng, 100, 10))
    expected = to_np(x)
    arr = x[5:].numpy()
    del x
    gc.collect()
    kiln.randn(100, 10)  # new allocations must not reuse the memory still in use
    np.testing.assert_array_equal(arr, expected[5:])


def test_from_numpy_releases_the_array():
    a = np.ones(16, np.float32)
    before = sys.getrefcount(a)
    x = kiln.from_numpy(a)
    assert sys.getrefcount(a) == before + 1
    v = x[2:]
    del x
    assert sys.getrefcount(a) == before + 1
    del v
    kiln.zeros(1).item()  # a sync point: a trace being recorded ends here
    gc.collect()
    assert sys.getrefcount(a) == before


def test_view_kept_after_owner_deleted(rng):
    a = randn(rng, 50, 4)
    x = k(a)
    v = x.t()[1]
    del x
    gc.collect()
    kiln.zeros(50, 4)
    np.testing.assert_array_equal(to_np(v), a[:, 1])


# ---- DLPack


def test_dlpack_device_and_capsule(rng):
    x = k(randn(rng, 2, 3))
    assert x.__dlpack_device__() == (1, 0)
    cap = x.__dlpack__()
    assert "dltensor" in repr(cap)
    y = kiln.from_dlpack(cap)
    np.testing.assert_array_equal(to_np(y), to_np(x))
    assert y.data_ptr() == x.data_ptr()
    with pytest.raises(ValueError, match="consumed once"):
        kiln.from_dlpack(cap)


def test_unconsumed_capsule_is_freed(rng):
    x = k(randn(rng, 8))
    for _ in range(100):
        cap = x.__dlpack__()
        del cap
    gc.collect()


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_dlpack_with_numpy(rng, dtype):
    if not hasattr(np, "from_dlpack"):
        pytest.skip("numpy without from_dlpack")
    a = sample(rng, (4, 5), dtype)
    try:
        x = kiln.from_dlpack(a)  # numpy is the producer
    except BufferError as e:  # numpy 1.24 exports no bool
        pytest.skip(str(e))
    np.testing.assert_array_equal(to_np(x), a)
    assert x.data_ptr() == a.ctypes.data
    if dtype != np.bool_:  # numpy 1.24 cannot import DLPack bool
        b = np.from_dlpack(k(a[:, ::2]))
        np.testing.assert_array_equal(b, a[:, ::2])


@requires_torch
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32", "int64"])
def test_dlpack_to_and_from_torch(rng, dtype):
    from torch.utils.dlpack import from_dlpack as torch_from_dlpack

    src = torch.from_numpy(randn(rng, 3, 5) * 10).to(getattr(torch, dtype))
    x = kiln.from_dlpack(src)
    assert x.dtype == getattr(kiln, dtype) and x.shape == (3, 5)
    assert x.data_ptr() == src.data_ptr()
    np.testing.assert_array_equal(to_np(x), to_np(src))
    src[0, 0] = 42
    assert x[0, 0].item() == 42
    # kiln -> torch
    y = kiln.randn(4, 6).to(getattr(kiln, dtype))[:, 1:]
    ty = torch_from_dlpack(y)
    assert ty.data_ptr() == y.data_ptr() and tuple(ty.stride()) == y.stride()
    np.testing.assert_array_equal(to_np(ty), to_np(y))
    y[1, 1] = 7
    assert ty[1, 1].item() == 7


@requires_torch
def test_dlpack_bool_from_torch(rng):
    src = torch.from_numpy(rng.random((4,)) > 0.5)
    try:
        cap = torch.utils.dlpack.to_dlpack(src)
    except RuntimeError:
        pytest.skip("this torch cannot export bool through DLPack")
    try:
        x = kiln.from_dlpack(cap)
    except TypeError:
        pytest.skip("this torch exports bool as uint8 (pre-DLPack 0.8)")
    assert x.tolist() == src.tolist()


@requires_torch
def test_dlpack_lifetimes_with_torch(rng):
    from torch.utils.dlpack import from_dlpack as torch_from_dlpack

    a = randn(rng, 64, 8)
    src = torch.from_numpy(a.copy())
    x = kiln.from_dlpack(src)
    view = x[3:5]
    del src, x
    gc.collect()
    torch.randn(64, 8)
    np.testing.assert_array_equal(to_np(view), a[3:5])
    # torch keeps a kiln tensor alive after the kiln handle is gone
    y = k(a)
    ty = torch_from_dlpack(y)
    del y
    gc.collect()
    kiln.randn(64, 8)
    np.testing.assert_array_equal(ty.numpy(), a)


def test_tensor_constructor_accepts_dlpack_producers(rng):
    a = randn(rng, 3, 3)
    x = kiln.tensor(k(a))
    np.testing.assert_array_equal(to_np(x), a)
    if torch is not None:
        y = kiln.tensor(torch.from_numpy(a))
        np.testing.assert_array_equal(to_np(y), a)
        y[0, 0] = 5
        assert a[0, 0] != 5  # tensor() copies


def test_as_tensor_shares_numpy_memory(rng):
    a = randn(rng, 4)
    x = kiln.as_tensor(a)
    a[0] = 3.0
    assert x[0].item() == 3.0


def test_from_dlpack_cpu_producer_gets_stream_none(rng):
    src = k(randn(rng, 5))

    class Producer:
        stream = "unset"

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, stream="unset"):
            self.stream = stream
            return src.__dlpack__()

    p = Producer()
    x = kiln.from_dlpack(p)
    assert p.stream is None and x.data_ptr() == src.data_ptr()
