"""Every op of the op table through kiln.<name>, against PyTorch CPU (and numpy) on
fresh random inputs. The pointwise cases are parametrized from the table itself."""

import math

import numpy as np
import pytest

import kiln
import kiln.distributed  # noqa: F401  (the collectives of the op table live there)
from helpers import assert_close, k, randn, requires_torch, t, to_np, torch

pytestmark = requires_torch

TABLE = dict(kiln._OP_TABLE)
UNARY = sorted(n for n, f in TABLE.items() if f == "unary" and n != "cast")
BINARY = sorted(n for n, f in TABLE.items() if f == "binary")

KILN_DTYPES = {
    "float32": (kiln.float32, np.float32),
    "float64": (kiln.float64, np.float64),
    "int32": (kiln.int32, np.int32),
    "int64": (kiln.int64, np.int64),
    "bool": (kiln.bool, np.bool_),
}
POSITIVE_ONLY = {"log", "sqrt", "rsqrt", "reciprocal", "log1p"}


def sample(rng, shape, dtype, positive=False, nonzero=False):
    """Random values of a numpy dtype: normals for floats, small ints, random bools."""
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    if np.issubdtype(dtype, np.integer):
        lo = 1 if positive else -9
        v = rng.integers(lo, 10, size=shape).astype(dtype)
        if nonzero:
            v[v == 0] = 3
        return v
    v = rng.standard_normal(shape).astype(dtype)
    if positive:
        v = np.abs(v) + np.asarray(0.1, dtype)
    if nonzero:
        v[np.abs(v) < 1e-3] = 0.5
    return v


def torch_or_skip(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (RuntimeError, TypeError) as e:
        pytest.skip(f"PyTorch does not support this case: {e}")


def torch_fn(name):
    return getattr(torch, name, None) or getattr(torch.nn.functional, name)


# ---- pointwise unary (from the table)

@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_unary(rng, name, dtype):
    kd, nd = KILN_DTYPES[dtype]
    a = sample(rng, (3, 17), nd, positive=name in POSITIVE_ONLY)
    expected = torch_or_skip(torch_fn(name), t(a))
    assert_close(getattr(kiln, name)(k(a)), expected, rtol=1e-5, atol=1e-6)
    # the method spelling too
    assert_close(getattr(k(a), name)(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_unary_16bit(rng, name, dtype):
    a = sample(rng, (4, 33), np.float32, positive=name in POSITIVE_ONLY)
    kd = getattr(kiln, dtype)
    x = k(a).to(kd)
    ref_in = t(to_np(x).astype(np.float32))  # the rounded inputs, computed in float32
    expected = torch_fn(name)(ref_in).to(getattr(torch, dtype)).float()
    out = getattr(kiln, name)(x)
    assert out.dtype == kd
    tol = 1e-2 if dtype == "float16" else 4e-2
    assert_close(out.float(), expected, rtol=tol, atol=tol)


def test_unary_noncontiguous(rng):
    a = randn(rng, 6, 8)
    x = k(a).transpose(0, 1)[::2]
    assert not x.is_contiguous()
    assert_close(kiln.exp(x), torch.exp(t(a).transpose(0, 1)[::2]))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_approximate(rng, approximate):
    a = randn(rng, 5, 7)
    expected = torch.nn.functional.gelu(t(a), approximate=approximate)
    assert_close(kiln.gelu(k(a), approximate=approximate), expected, rtol=1e-5, atol=1e-6)
    assert_close(k(a).gelu(approximate), expected, rtol=1e-5, atol=1e-6)


def test_cast(rng):
    a = randn(rng, 4, 5) * 10
    for name, (kd, _) in KILN_DTYPES.items():
        assert_close(kiln.cast(k(a), kd), t(a).to(getattr(torch, name)))


# ---- pointwise binary (from the table)

BINARY_DTYPES = [
    ("float32", "float32"),
    ("float64", "float32"),
    ("int32", "float32"),
    ("int64", "int32"),
    ("int32", "int32"),
    ("bool", "int64"),
    ("bool", "float64"),
]


def binary_inputs(rng, name, da, db, shape_a=(4, 5), shape_b=(4, 5)):
    nd_a, nd_b = KILN_DTYPES[da][1], KILN_DTYPES[db][1]
    a = sample(rng, shape_a, nd_a, positive=name == "pow")
    b = sample(rng, shape_b, nd_b, nonzero=name == "div", positive=name == "pow")
    if name == "pow" and np.issubdtype(nd_b, np.floating):
        b = (b % 3).astype(nd_b)
    if name == "pow" and np.issubdtype(nd_b, np.integer):
        b = (np.abs(b) % 4).astype(nd_b)
    return a, b


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("da,db", BINARY_DTYPES)
def test_binary_tensor_tensor(rng, name, da, db):
    a, b = binary_inputs(rng, name, da, db)
    expected = torch_or_skip(torch_fn(name), t(a), t(b))
    assert_close(getattr(kiln, name)(k(a), k(b)), expected, rtol=1e-5, atol=1e-5)
    assert_close(getattr(k(a), name)(k(b)), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", BINARY)
def test_binary_broadcast(rng, name):
    a, b = binary_inputs(rng, name, "float32", "float32", (3, 1, 5), (4, 1))
    expected = torch_fn(name)(t(a), t(b))
    assert_close(getattr(kiln, name)(k(a), k(b)), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize("scalar", [2, 1.5, -3, True])
def test_binary_scalar(rng, name, dtype, scalar):
    nd = KILN_DTYPES[dtype][1]
    a = sample(rng, (3, 6), nd, positive=name == "pow", nonzero=True)
    if name == "pow" and (scalar is True or (isinstance(scalar, int) and scalar < 0)):
        pytest.skip("integer base to a negative power")
    fn = torch_fn(name)
    s_t = torch.tensor(scalar)  # a 0-dim tensor promotes like a Python scalar
    expected = torch_or_skip(fn, t(a), s_t)
    assert_close(getattr(kiln, name)(k(a), scalar), expected, rtol=1e-5, atol=1e-5)
    # scalar on the left
    if name == "div" and scalar is True:
        pass
    expected_left = torch_or_skip(fn, s_t, t(a))
    assert_close(getattr(kiln, name)(scalar, k(a)), expected_left, rtol=1e-5, atol=1e-5)


# ---- where, clamp

def test_where(rng):
    c = rng.random((3, 4)) > 0.5
    a, b = randn(rng, 3, 4), randn(rng, 1, 4)
    assert_close(kiln.where(k(c), k(a), k(b)), torch.where(t(c), t(a), t(b)))
    assert_close(kiln.where(k(c), 2.5, k(b)), torch.where(t(c), torch.tensor(2.5), t(b)))
    assert_close(kiln.where(k(c), k(a), -1.0), torch.where(t(c), t(a), torch.tensor(-1.0)))
    assert_close(kiln.where(k(c), 1.0, 0.0), torch.where(t(c), 1.0, 0.0))
    ai = rng.integers(-5, 5, (3, 4))
    assert_close(kiln.where(k(c), k(ai), k(b)), torch.where(t(c), t(ai), t(b)))


def test_clamp(rng):
    a = randn(rng, 5, 6) * 3
    x = t(a)
    assert_close(kiln.clamp(k(a), -1.0, 0.5), torch.clamp(x, -1.0, 0.5))
    assert_close(kiln.clamp(k(a), min=0.2), torch.clamp(x, min=0.2))
    assert_close(kiln.clamp(k(a), max=-0.2), torch.clamp(x, max=-0.2))
    assert_close(k(a).clamp(-1, 1), x.clamp(-1, 1))
    assert_close(k(a).clip(0), x.clip(0))
    lo, hi = randn(rng, 5, 6), randn(rng, 1, 6) + 2
    assert_close(kiln.clamp(k(a), k(lo), k(hi)), torch.clamp(x, t(lo), t(hi)))
    ai = rng.integers(-20, 20, (4, 4))
    assert_close(kiln.clamp(k(ai), -3, 7), torch.clamp(t(ai), -3, 7))
    with pytest.raises(ValueError):
        kiln.clamp(k(a))


# ---- reductions

REDUCE_DIMS = [None, 0, -1, (0, 2), (1,), (-1, 0)]


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "logsumexp"])
@pytest.mark.parametrize("dim", REDUCE_DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions(rng, name, dim, keepdim):
    a = randn(rng, 3, 4, 5)
    x = t(a)
    if dim is None:
        if keepdim:
            pytest.skip("torch takes keepdim only with dim")
        expected = getattr(torch, name)(x) if name in ("sum", "mean") else \
            getattr(torch, name)(x, dim=(0, 1, 2))
        out = getattr(kiln, name)(k(a))
    else:
        expected = getattr(torch, name)(x, dim=dim, keepdim=keepdim)
        out = getattr(kiln, name)(k(a), dim, keepdim)
        assert_close(getattr(k(a), name)(dim=dim, keepdim=keepdim), expected, rtol=1e-5,
                     atol=1e-5)
    assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_logsumexp_of_large_and_infinite_values_like_torch():
    inf, nan = np.inf, np.nan
    a = np.array([[1000, 1000, -inf], [-inf, -inf, -inf], [inf, 1, -inf], [inf, inf, 2],
                  [nan, inf, 1], [-1e30, 3, 4]], np.float32)
    expected = torch.logsumexp(t(a), 1)
    assert_close(kiln.logsumexp(k(a), 1), expected)
    fused = kiln.compile(lambda x: kiln.logsumexp(x * 1.0, 1) + 0.0)
    for _ in range(4):  # recorded, compiled, replayed: the fused row kernel
        assert_close(fused(k(a)), expected)


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_sum_integers_accumulate_in_int64(rng, dtype):
    a = sample(rng, (6, 7), KILN_DTYPES[dtype][1])
    assert_close(kiln.sum(k(a)), torch.sum(t(a)))
    assert_close(kiln.sum(k(a), 1), torch.sum(t(a), 1))


def test_sum_dtype_argument(rng):
    a = sample(rng, (4, 5), np.int32)
    assert_close(k(a).sum(dim=1, dtype=kiln.float64), t(a).sum(dim=1, dtype=torch.float64))
    assert_close(k(a).mean(dtype=kiln.float32), t(a).float().mean())


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin(rng, dim, keepdim):
    a = randn(rng, 6, 9)
    x = t(a)
    if dim is None and keepdim:
        pytest.skip("keepdim needs dim")
    assert_close(kiln.argmax(k(a), dim, keepdim), torch.argmax(x, dim, keepdim))
    assert_close(k(a).argmin(dim, keepdim), x.argmin(dim, keepdim))
    assert_close(kiln.argmin(k(a), dim, keepdim), torch.argmin(x, dim, keepdim))


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_forms(rng, name):
    a = randn(rng, 5, 7)
    b = randn(rng, 5, 7)
    x = t(a)
    assert_close(getattr(kiln, name)(k(a)), getattr(torch, name)(x))
    assert_close(getattr(k(a), name)(), getattr(x, name)())
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            got = getattr(k(a), name)(dim, keepdim=keepdim)
            exp = getattr(x, name)(dim, keepdim=keepdim)
            assert_close(got.values, exp.values)
            assert_close(got.indices, exp.indices)
            values, indices = getattr(kiln, name)(k(a), dim=dim, keepdim=keepdim)
            assert_close(values, exp.values)
            assert_close(indices, exp.indices)
    assert_close(getattr(kiln, name)(k(a), k(b)), getattr(torch, name)(x, t(b)))
    assert_close(getattr(k(a), name)(k(b)), getattr(x, name)(t(b)))


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1), -1])
@pytest.mark.parametrize("unbiased", [True, False])
@pytest.mark.parametrize("keepdim", [False, True])
def test_var_std(rng, dim, unbiased, keepdim):
    a = randn(rng, 6, 8) * 2 + 1
    x = t(a)
    if dim is None:
        if keepdim:
            pytest.skip("keepdim needs dim")
        ev, es = torch.var(x, unbiased=unbiased), torch.std(x, unbiased=unbiased)
        gv, gs = kiln.var(k(a), unbiased=unbiased), k(a).std(unbiased=unbiased)
    else:
        ev = torch.var(x, dim, unbiased=unbiased, keepdim=keepdim)
        es = torch.std(x, dim, unbiased=unbiased, keepdim=keepdim)
        gv = k(a).var(dim, unbiased=unbiased, keepdim=keepdim)
        gs = kiln.std(k(a), dim, unbiased=unbiased, keepdim=keepdim)
    assert_close(gv, ev, rtol=1e-4, atol=1e-5)
    assert_close(gs, es, rtol=1e-4, atol=1e-5)


def test_var_correction(rng):
    a = randn(rng, 10, 4)
    assert_close(kiln.var(k(a), 0, correction=0), torch.var(t(a), 0, unbiased=False),
                 rtol=1e-5)
    assert_close(kiln.var(k(a), 0, correction=1), torch.var(t(a), 0, unbiased=True),
                 rtol=1e-5)


# ---- normalization

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_log_softmax(rng, dim):
    a = randn(rng, 4, 5, 6) * 3
    x = t(a)
    assert_close(kiln.softmax(k(a), dim), torch.softmax(x, dim), rtol=1e-5, atol=1e-6)
    assert_close(kiln.log_softmax(k(a), dim), torch.log_softmax(x, dim), rtol=1e-5, atol=1e-5)
    assert_close(k(a).softmax(dim), x.softmax(dim), rtol=1e-5, atol=1e-6)
    assert_close(k(a).log_softmax(dim=dim), x.log_softmax(dim=dim), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_rows_of_every_length_and_special_values(rng, dtype):
    """The vector row kernel (ops/cpu/simd.h softmax_row): rows shorter than a vector,
    with tails, longer than its 64-element sum blocks; rows holding NaN, +inf, -inf and
    all -inf give PyTorch's values."""
    for n in (1, 3, 7, 8, 9, 63, 64, 65, 257, 1000):
        a = (rng.standard_normal((5, n)) * 4).astype(dtype)
        a[1, n // 2] = np.nan
        a[2, :] = -np.inf
        a[3, 0] = -np.inf
        a[4, n - 1] = np.inf
        x = t(a)
        assert_close(kiln.softmax(k(a), -1), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
        assert_close(kiln.log_softmax(k(a), -1), torch.log_softmax(x, -1), rtol=1e-5, atol=1e-5)


def test_softmax_int_input(rng):
    a = rng.integers(-3, 3, (3, 4))
    assert_close(kiln.softmax(k(a), 1), torch.softmax(t(a).float(), 1), rtol=1e-5)


@pytest.mark.parametrize("affine", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("shape", [(8,), (4, 8)])
def test_layer_norm(rng, affine, shape):
    a = randn(rng, 3, 4, 8) * 2 + 0.5
    w = randn(rng, *shape) if affine[0] else None
    b = randn(rng, *shape) if affine[1] else None
    expected = torch.nn.functional.layer_norm(t(a), shape, t(w) if w is not None else None,
                                              t(b) if b is not None else None, eps=1e-5)
    got = kiln.layer_norm(k(a), shape, k(w) if w is not None else None,
                          k(b) if b is not None else None, 1e-5)
    assert_close(got, expected, rtol=1e-4, atol=1e-5)


# ---- linear algebra, convolution, pooling

@pytest.mark.parametrize("sa,sb", [
    ((5, 7), (7, 3)), ((7,), (7, 3)), ((5, 7), (7,)), ((7,), (7,)),
    ((2, 5, 7), (7, 3)), ((2, 5, 7), (2, 7, 3)), ((4, 1, 5, 7), (3, 7, 2)),
])
def test_matmul(rng, sa, sb):
    a, b = randn(rng, *sa), randn(rng, *sb)
    expected = torch.matmul(t(a), t(b))
    assert_close(kiln.matmul(k(a), k(b)), expected, rtol=1e-4, atol=1e-5)
    assert_close(k(a) @ k(b), expected, rtol=1e-4, atol=1e-5)
    assert_close(k(a).matmul(k(b)), expected, rtol=1e-4, atol=1e-5)


def test_matmul_float64(rng):
    a, b = randn(rng, 6, 5, dtype=np.float64), randn(rng, 5, 4, dtype=np.float64)
    assert_close(kiln.matmul(k(a), k(b)), torch.matmul(t(a), t(b)), rtol=1e-10)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(6, 5), (2, 3, 5), (5,)])
def test_linear(rng, bias, shape):
    x, w = randn(rng, *shape), randn(rng, 4, 5)
    b = randn(rng, 4) if bias else None
    expected = torch.nn.functional.linear(t(x), t(w), t(b) if bias else None)
    got = kiln.linear(k(x), k(w), k(b) if bias else None)
    assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("stride,padding", [(1, 0), (2, 1), ((1, 2), (2, 0))])
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d(rng, stride, padding, bias):
    x, w = randn(rng, 2, 3, 9, 8), randn(rng, 4, 3, 3, 2)
    b = randn(rng, 4) if bias else None
    expected = torch.nn.functional.conv2d(t(x), t(w), t(b) if bias else None, stride, padding)
    got = kiln.conv2d(k(x), k(w), k(b) if bias else None, stride, padding)
    assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("kernel,stride,padding", [(2, None, 0), (3, 2, 1), ((2, 3), (1, 2), 0)])
def test_pool2d(rng, name, kernel, stride, padding):
    x = randn(rng, 2, 3, 9, 10)
    fn = getattr(torch.nn.functional, name)
    expected = fn(t(x), kernel, stride, padding)
    assert_close(getattr(kiln, name)(k(x), kernel, stride, padding), expected, rtol=1e-5,
                 atol=1e-6)


@pytest.mark.parametrize("kernel,stride,padding", [(3, 1, 0), (3, 2, 1), ((2, 3), (1, 2), 0)])
def test_im2col_col2im(rng, kernel, stride, padding):
    x = randn(rng, 2, 3, 9, 10)
    cols = torch.nn.functional.unfold(t(x), kernel, 1, padding, stride)
    got = kiln.im2col(k(x), kernel, stride, padding)
    assert_close(got, cols, rtol=1e-6, atol=1e-7)
    c = randn(rng, *cols.shape)
    folded = torch.nn.functional.fold(t(c), (9, 10), kernel, 1, padding, stride)
    assert_close(kiln.col2im(k(c), (9, 10), kernel, stride, padding), folded, rtol=1e-6,
                 atol=1e-6)


# ---- joining, splitting, indexing

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_stack(rng, dim):
    parts = [randn(rng, 3, 4) for _ in range(3)]
    assert_close(kiln.cat([k(p) for p in parts], dim), torch.cat([t(p) for p in parts], dim))
    assert_close(kiln.stack(tuple(k(p) for p in parts), dim),
                 torch.stack([t(p) for p in parts], dim))
    # sizes differ along the cat dim
    a, b = randn(rng, 3, 4), randn(rng, 3, 2)
    assert_close(kiln.cat([k(a), k(b)], 1), torch.cat([t(a), t(b)], 1))
    # mixed dtypes promote
    ai = rng.integers(0, 5, (3, 4))
    assert_close(kiln.cat([k(ai), k(a)]), torch.cat([t(ai), t(a)]))


@pytest.mark.parametrize("chunks,dim", [(3, 0), (2, 1), (4, 1), (5, 0)])
def test_chunk(rng, chunks, dim):
    a = randn(rng, 7, 6)
    expected = torch.chunk(t(a), chunks, dim)
    for fn in (lambda: kiln.chunk(k(a), chunks, dim), lambda: k(a).chunk(chunks, dim)):
        got = fn()
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_close(g, e)


@pytest.mark.parametrize("sizes,dim", [(2, 0), (4, 1), ([1, 2, 4], 0), ((3, 3), 1)])
def test_split(rng, sizes, dim):
    a = randn(rng, 7, 6)
    expected = torch.split(t(a), sizes, dim)
    for got in (kiln.split(k(a), sizes, dim), k(a).split(sizes, dim)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_close(g, e)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(rng, dim):
    a = randn(rng, 5, 6, 4)
    idx = rng.integers(0, a.shape[dim], 7)
    expected = torch.index_select(t(a), dim, t(idx))
    assert_close(kiln.index_select(k(a), dim, k(idx)), expected)
    assert_close(k(a).index_select(dim, k(idx)), expected)
    assert_close(kiln.index_select(k(a), dim, k(idx.astype(np.int32))), expected)


def test_embedding(rng):
    w = randn(rng, 10, 4)
    idx = rng.integers(0, 10, (3, 5))
    expected = torch.nn.functional.embedding(t(idx), t(w))
    assert_close(kiln.embedding(k(w), k(idx)), expected)


# ---- views and data movement as functions

def test_view_functions(rng):
    a = randn(rng, 2, 3, 4)
    x = t(a)
    assert_close(kiln.view(k(a), (6, 4)), x.view(6, 4))
    assert_close(kiln.reshape(k(a), (4, -1)), x.reshape(4, -1))
    assert_close(kiln.permute(k(a), (2, 0, 1)), x.permute(2, 0, 1))
    assert_close(kiln.slice(k(a), 2, 1, 4, 2), x[:, :, 1:4:2])
    assert_close(kiln.select(k(a), 1, -1), x.select(1, -1))
    assert_close(kiln.expand(k(a)[:, :1], (2, 5, 4)), x[:, :1].expand(2, 5, 4))
    assert_close(kiln.squeeze(k(a)[:, :1]), x[:, :1].squeeze())
    assert_close(kiln.squeeze(k(a)[:, :1], 1), x[:, :1].squeeze(1))
    assert_close(kiln.unsqueeze(k(a), -1), x.unsqueeze(-1))
    assert_close(kiln.transpose(k(a), 0, 2), x.transpose(0, 2))
    assert_close(kiln.flatten(k(a), 1), x.flatten(1))
    assert_close(kiln.narrow(k(a), 2, 1, 2), x.narrow(2, 1, 2))
    assert_close(kiln.to_device(k(a), "cpu"), x)


# ---- factories

@pytest.mark.parametrize("name", ["zeros", "ones", "empty"])
def test_sized_factories(name):
    fn = getattr(kiln, name)
    for args in [(2, 3), ((2, 3),), ([4],), ((),)]:
        x = fn(*args)
        shape = args[0] if len(args) == 1 else args
        assert tuple(x.shape) == tuple(shape)
        assert x.dtype == kiln.float32 and x.device == kiln.device("cpu")
    x = fn(3, 2, dtype=kiln.int32)
    assert x.dtype == kiln.int32 and x.shape == (3, 2)
    if name != "empty":
        value = 0 if name == "zeros" else 1
        np.testing.assert_array_equal(to_np(fn(4, 5, dtype=kiln.float64)), np.full((4, 5), value))


def test_full(rng):
    assert_close(kiln.full((2, 3), 1.5), torch.full((2, 3), 1.5))
    assert_close(kiln.full((2, 3), 7), torch.full((2, 3), 7))
    assert_close(kiln.full((2,), True), torch.full((2,), True))
    assert_close(kiln.full([3], 2, dtype=kiln.float16), torch.full([3], 2, dtype=torch.float16))
    assert_close(kiln.scalar_tensor(3.5), torch.scalar_tensor(3.5))


@pytest.mark.parametrize("args", [(5,), (2, 9), (1, 10, 3), (0.5, 3.0, 0.25), (5, 0, -1),
                                  (-2.0, 2.0, 0.3)])
def test_arange(args):
    assert_close(kiln.arange(*args), torch.arange(*args), rtol=1e-6)


def test_arange_dtype_device():
    assert_close(kiln.arange(6, dtype=kiln.float64), torch.arange(6, dtype=torch.float64))
    assert kiln.arange(3, device="cpu").device.type == "cpu"


def test_rand_randn_statistics():
    kiln.manual_seed(1234)
    u = to_np(kiln.rand(200, 500))
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.01
    n = to_np(kiln.randn((200, 500), dtype=kiln.float64))
    assert n.dtype == np.float64
    assert abs(n.mean()) < 0.02 and abs(n.std() - 1.0) < 0.02
    assert kiln.rand(3, dtype=kiln.float16).dtype == kiln.float16


def test_manual_seed_reproducible():
    kiln.manual_seed(7)
    a, b = to_np(kiln.rand(100)), to_np(kiln.randn(3, 4))
    kiln.manual_seed(7)
    np.testing.assert_array_equal(a, to_np(kiln.rand(100)))
    np.testing.assert_array_equal(b, to_np(kiln.randn(3, 4)))
    assert not np.array_equal(to_np(kiln.rand(100)), a)  # the offset advances


def test_like_factories(rng):
    x = k(randn(rng, 3, 4)).to(kiln.float64)
    for name in ("zeros_like", "ones_like", "empty_like", "rand_like", "randn_like"):
        y = getattr(kiln, name)(x)
        assert y.shape == x.shape and y.dtype == kiln.float64
    assert_close(kiln.full_like(x, 2.5), torch.full((3, 4), 2.5, dtype=torch.float64))
    assert kiln.zeros_like(x, dtype=kiln.int32).dtype == kiln.int32


# ---- the table is covered

COVERED = set(UNARY) | set(BINARY) | {
    # the fused attention rows: tests/python/test_attention.py
    "attention", "attention_output", "attention_backward",
    # the fused LSTM rows: tests/python/test_rnn.py (kiln.lstm_layer is the API: packed
    # forward + lstm_output)
    "lstm_layer", "lstm_output", "lstm_backward",
    # the collectives (kiln.distributed.<name>): tests/python/test_distributed.py
    "all_reduce",
    "cast", "clamp", "where", "sum", "mean", "max", "min", "argmax", "var", "logsumexp",
    "softmax", "log_softmax", "layer_norm", "matmul", "linear", "conv2d", "max_pool2d",
    "avg_pool2d", "im2col", "col2im",
    # max pooling's gradient on the CPU: test_pool_backward.py
    "max_pool2d_backward",
    "cat", "index_select", "to_device", "empty", "full", "arange", "rand", "randn", "view",
    "permute", "slice", "select", "expand", "squeeze", "unsqueeze",
    # tested in test_along_dim.py
    "gather", "scatter", "scatter_add", "index_add", "argsort", "topk", "cumsum", "cumprod",
    "prod",
    # tested in test_sample_einsum.py
    "multinomial", "nonzero",
}


def test_every_table_op_is_tested_and_reachable():
    names = set(TABLE)
    assert not (names - COVERED), f"ops of the table with no test here: {sorted(names - COVERED)}"
    assert kiln._missing_ops() == []
    for name in names:
        home = kiln.distributed if TABLE[name] == "collective" else kiln
        assert callable(getattr(home, name)), name


def test_math_constants_sanity():
    # a cheap end-to-end check that the module's float handling is IEEE
    assert math.isclose(float(kiln.exp(kiln.tensor(1.0))), math.e, rel_tol=1e-6)
