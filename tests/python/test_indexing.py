"""Indexing and assignment against numpy (the semantics PyTorch follows): ints (negative
too), slices with steps, None, Ellipsis, integer tensors / lists (gathers), bool masks."""

import numpy as np
import pytest

import kiln
from helpers import k, randn, to_np

BASIC = [
    0, -1, 2, (1, 2), (-1, -2, 0), slice(None), slice(1, 3), slice(None, None, 2),
    slice(-3, None), slice(None, -1, 3), slice(5, 1), slice(-100, 100), (slice(None), 1),
    (Ellipsis, 0), (0, Ellipsis), (Ellipsis, slice(1, None, 2)), (None,), (None, 0),
    (slice(None), None, 1), (1, None, slice(None, None, 2), None), (Ellipsis, None),
    (0, 1, 2), (slice(1, 3), slice(None, None, 3), -1), Ellipsis, (),
    (slice(None, None, 2), Ellipsis, None), (np.int64(1), np.int32(-1)),
]


@pytest.mark.parametrize("index", BASIC, ids=repr)
def test_basic_indexing_matches_numpy(rng, index):
    a = randn(rng, 4, 5, 6)
    x = k(a)
    got = x[index]
    np.testing.assert_array_equal(to_np(got), a[index])
    assert got._shares_storage(x)  # basic indexing returns a view


INT_INDEX = [
    [0, 2, 2], [-1, 0], np.array([[0, 1], [3, 2]]), np.array(2),
    (slice(None), [4, 0, -2]), (Ellipsis, np.array([[5], [0]])), (1, [0, 0, 3]),
    ([3, 1], slice(None, None, 2)), (slice(1, None), np.array([1, 2]), 0),
    (slice(None), 0, np.array([1, -1])), ([2, 0], Ellipsis, 1), (None, [1, 2]),
]


@pytest.mark.parametrize("index", INT_INDEX, ids=repr)
def test_integer_array_indexing_matches_numpy(rng, index):
    a = randn(rng, 4, 5, 6)
    kidx = tuple(k(i) if isinstance(i, np.ndarray) else i for i in index) \
        if isinstance(index, tuple) else (k(index) if isinstance(index, np.ndarray) else index)
    np.testing.assert_array_equal(to_np(k(a)[kidx]), a[index])


def test_integer_tensor_index_dtypes_and_devices(rng):
    a = randn(rng, 6, 3)
    idx = rng.integers(-6, 6, 10)
    for dtype in (kiln.int64, kiln.int32):
        np.testing.assert_array_equal(to_np(k(a)[k(idx).to(dtype)]), a[idx])


@pytest.mark.parametrize("shape,mask_shape", [((4, 5), (4, 5)), ((4, 5), (4,)), ((3, 4, 2), (3, 4))])
def test_bool_mask_indexing(rng, shape, mask_shape):
    a = randn(rng, *shape)
    m = rng.random(mask_shape) > 0.4
    np.testing.assert_array_equal(to_np(k(a)[k(m)]), a[m])
    np.testing.assert_array_equal(to_np(k(a)[m.tolist()]), a[m])


def test_bool_mask_after_slice(rng):
    a = randn(rng, 3, 6)
    m = rng.random(6) > 0.5
    np.testing.assert_array_equal(to_np(k(a)[:, k(m)]), a[:, m])


def test_index_errors(rng):
    x = k(randn(rng, 3, 4))
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        x[3]
    with pytest.raises(IndexError, match="out of bounds for dimension 1 with size 4"):
        x[0, -5]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError):
        x["a"]
    with pytest.raises(IndexError):
        x[1.5]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[::-1]
    with pytest.raises(IndexError, match="tensors used as indices"):
        x[kiln.tensor([0.0, 1.0])]
    with pytest.raises(IndexError):
        x[kiln.tensor([0, 7])]
    with pytest.raises(IndexError, match="mask"):
        x[kiln.tensor([True, False])]
    assert isinstance(pytest.raises(IndexError, lambda: x[5]).value, kiln.KilnError)


# ---- assignment

SET_INDEX = [
    0, -1, (1, 2), slice(1, 3), slice(None, None, 2), (slice(None), 0), (Ellipsis, -1),
    (slice(None), slice(1, None, 2)), (None, 1), (0, Ellipsis, slice(0, 1)),
]


@pytest.mark.parametrize("index", SET_INDEX, ids=repr)
def test_setitem_scalar_and_tensor(rng, index):
    a = randn(rng, 4, 5)
    x = k(a)
    x[index] = 7.5
    expected = a.copy()
    expected[index] = 7.5
    np.testing.assert_array_equal(to_np(x), expected)
    # a tensor value (broadcast to the indexed region)
    region = expected[index]
    v = randn(rng, *region.shape) if region.ndim else randn(rng, 1)[0]
    x[index] = kiln.tensor(v)
    expected[index] = v
    np.testing.assert_array_equal(to_np(x), expected)


def test_setitem_broadcast_list_and_dtype(rng):
    x = kiln.zeros(3, 4, dtype=kiln.int32)
    x[1] = kiln.tensor([1.9, 2.0, 3.0, 4.0])  # float into int rounds toward zero, like torch
    x[:, 0] = [7, 8, 9]
    x[2, 1:] = 5
    assert x.tolist() == [[7, 0, 0, 0], [8, 2, 3, 4], [9, 5, 5, 5]]
    x[0] = np.array([1, 1, 1, 1])
    assert x[0].tolist() == [1, 1, 1, 1]


def test_setitem_bool_mask(rng):
    a = randn(rng, 5, 6)
    x = k(a)
    m = a > 0
    x[k(m)] = 0.0
    expected = a.copy()
    expected[m] = 0.0
    np.testing.assert_array_equal(to_np(x), expected)
    b = randn(rng, 5, 6)
    x[k(b > 0.5)] = k(b)
    expected = np.where(b > 0.5, b, expected)
    np.testing.assert_array_equal(to_np(x), expected)


def test_setitem_writes_through_views(rng):
    a = randn(rng, 4, 6)
    x = k(a)
    v = x[1:3]
    v[:, ::2] = -1.0
    expected = a.copy()
    expected[1:3, ::2] = -1.0
    np.testing.assert_array_equal(to_np(x), expected)


def test_setitem_tensor_index_unsupported(rng):
    x = k(randn(rng, 4))
    with pytest.raises(IndexError, match="assignment through a tensor or list index"):
        x[kiln.tensor([0, 1])] = 1.0
