"""CUDA legs of the op suites (test_ops.py, test_autograd.py): each op with a CUDA kernel
on CUDA tensors against the same op on CPU tensors of the same inputs -- the CPU results
are what the torch-oracle tests check -- with the input gradients of the differentiable
ones. No torch: these run on the GPU machine, where PyTorch is not importable. Inputs
come from test_ops.py's samplers; tolerances allow for reductions and GEMMs that order
their sums differently on the GPU (TF32 is off by default)."""

import numpy as np
import pytest

import kiln
from helpers import NoGrad, check_on_cuda, randn
from test_ops import BINARY, BINARY_DTYPES, KILN_DTYPES, POSITIVE_ONLY, UNARY, REDUCE_DIMS, \
    binary_inputs, sample

FLOATS = ("float32", "float64")
# Sum-like results: the GPU adds in another order.
RED = dict(rtol=1e-4, atol=1e-5)
GEMM = dict(rtol=1e-4, atol=1e-4)
COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}


def floating(dtype):
    return dtype in FLOATS


# ---- pointwise unary (from the op table), forward and gradient

@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_unary_cuda(cuda_leg, rng, name, dtype):
    a = sample(rng, (3, 17), KILN_DTYPES[dtype][1], positive=name in POSITIVE_ONLY)
    fn = getattr(kiln, name)
    try:
        fn(kiln.tensor(a))
    except kiln.KilnError:  # not defined for this dtype: the device must say so too
        with pytest.raises(kiln.KilnError):
            fn(kiln.tensor(a).to(cuda_leg))
        return
    check_on_cuda(cuda_leg, fn, a, grad=floating(dtype) and name not in ("sign",),
                  rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", UNARY)
def test_unary_noncontiguous_method_cuda(cuda_leg, rng, name):
    a = sample(rng, (6, 5), np.float32, positive=name in POSITIVE_ONLY)
    check_on_cuda(cuda_leg, lambda x: getattr(x.t()[::2], name)(), a, grad=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_16bit_cuda(cuda_leg, rng, name, dtype):
    a = sample(rng, (4, 33), np.float32, positive=name in POSITIVE_ONLY)
    kd = getattr(kiln, dtype)
    tol = 1e-2 if dtype == "float16" else 4e-2
    check_on_cuda(cuda_leg, lambda x: getattr(kiln, name)(x.to(kd)), a, rtol=tol, atol=tol)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_cuda(cuda_leg, rng, approximate):
    check_on_cuda(cuda_leg, lambda x: kiln.gelu(x, approximate=approximate),
                  randn(rng, 5, 7) * 2, grad=True)


@pytest.mark.parametrize("to", list(KILN_DTYPES) + ["float16", "bfloat16"])
def test_cast_cuda(cuda_leg, rng, to):
    a = randn(rng, 4, 5) * 10
    # 16-bit: one unit in the last place, should the devices round a tie differently
    tol = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}.get(to, 1e-6)
    check_on_cuda(cuda_leg, lambda x: kiln.cast(x, getattr(kiln, to)), a, rtol=tol, atol=0)


HALF_OPS = {
    "add": lambda x, y: x + y, "mul_scalar": lambda x, y: x * 1.5 - y, "div": lambda x, y: x / (
        y.abs() + 1.0), "maximum": kiln.maximum, "sum": lambda x, y: x.sum(1),
    "mean": lambda x, y: x.mean(0), "amax": lambda x, y: x.amax(-1),
    "softmax": lambda x, y: kiln.softmax(x, -1), "log_softmax": lambda x, y: kiln.log_softmax(
        x, 0), "layer_norm": lambda x, y: kiln.layer_norm(x, (x.shape[-1],)),
    "matmul": lambda x, y: x @ y.t(), "where": lambda x, y: kiln.where(x > y, x, y),
    "clamp": lambda x, y: x.clamp(-0.5, 0.5), "cat": lambda x, y: kiln.cat([x, y], 1),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(HALF_OPS))
def test_16bit_ops_cuda(cuda_leg, rng, name, dtype):
    """Non-unary ops in float16 / bfloat16: a few units in the last place (the devices
    may accumulate in another order, in float32)."""
    kd = getattr(kiln, dtype)
    tol = dict(rtol=1e-2, atol=2e-2) if dtype == "float16" else dict(rtol=4e-2, atol=8e-2)
    check_on_cuda(cuda_leg, lambda x, y: HALF_OPS[name](x.to(kd), y.to(kd)),
                  randn(rng, 6, 8), randn(rng, 6, 8), **tol)


# ---- pointwise binary (from the op table)

@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("da,db", BINARY_DTYPES)
def test_binary_cuda(cuda_leg, rng, name, da, db):
    a, b = binary_inputs(rng, name, da, db)
    fn = getattr(kiln, name)
    try:
        fn(kiln.tensor(a), kiln.tensor(b))
    except kiln.KilnError:
        with pytest.raises(kiln.KilnError):
            fn(kiln.tensor(a).to(cuda_leg), kiln.tensor(b).to(cuda_leg))
        return
    grad = floating(da) and floating(db) and name not in COMPARISONS
    check_on_cuda(cuda_leg, fn, a, b, grad=grad, rtol=1e-5, atol=1e-5)


BROADCAST_SHAPES = [((3, 1, 5), (4, 1)), ((2, 3, 4), (3, 1)), ((4,), (2, 3, 4)), ((3, 4), ())]


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("shapes", BROADCAST_SHAPES, ids=str)
def test_binary_broadcast_cuda(cuda_leg, rng, name, shapes):
    a, b = binary_inputs(rng, name, "float32", "float32", *shapes)
    # the broadcast operand's gradient is a reduction
    check_on_cuda(cuda_leg, getattr(kiln, name), a, b, grad=name not in COMPARISONS, **RED)


@pytest.mark.parametrize("name,scalar", [(n, s) for n in BINARY for s in (2, 1.5, -3)
                                         if n != "pow" or s != -3])  # int base ** -3
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_binary_scalar_cuda(cuda_leg, rng, name, dtype, scalar):
    a = sample(rng, (3, 6), KILN_DTYPES[dtype][1], positive=name == "pow", nonzero=True)
    fn = getattr(kiln, name)
    check_on_cuda(cuda_leg, lambda x: (fn(x, scalar), fn(scalar, x)), a)


# ---- where, clamp

@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
def test_where_dtypes_cuda(cuda_leg, rng, dtype):
    c = rng.random((5, 6)) > 0.5
    a = sample(rng, (5, 6), KILN_DTYPES[dtype][1])
    b = sample(rng, (1, 6), KILN_DTYPES[dtype][1])
    check_on_cuda(cuda_leg, kiln.where, c, a, b, grad=floating(dtype))
    check_on_cuda(cuda_leg, lambda c, a: kiln.where(c[:, :1], a, 3), c, a, grad=floating(dtype))


def test_where_cuda(cuda_leg, rng):
    c = rng.random((3, 4)) > 0.5
    a, b = randn(rng, 3, 4), randn(rng, 1, 4)
    check_on_cuda(cuda_leg, kiln.where, c, a, b, grad=True)
    check_on_cuda(cuda_leg, lambda c, b: kiln.where(c, 2.5, b), c, b, grad=True)
    check_on_cuda(cuda_leg, lambda c: kiln.where(c, 1.0, 0.0), c)
    check_on_cuda(cuda_leg, kiln.where, c, rng.integers(-5, 5, (3, 4)), b)


@pytest.mark.parametrize("bounds", [(-1.0, 0.5), (0.2, None), (None, -0.2), (-3, 7)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_clamp_cuda(cuda_leg, rng, bounds, dtype):
    a = sample(rng, (5, 6), KILN_DTYPES[dtype][1]) * 3
    check_on_cuda(cuda_leg, lambda x: kiln.clamp(x, *bounds), a, grad=floating(dtype))
    check_on_cuda(cuda_leg, lambda x: x.t().clamp(*bounds), a, grad=floating(dtype))


def test_clamp_tensor_bounds_cuda(cuda_leg, rng):
    a, lo, hi = randn(rng, 5, 6) * 3, randn(rng, 5, 6), randn(rng, 1, 6) + 2
    check_on_cuda(cuda_leg, kiln.clamp, a, lo, hi, grad=True, **RED)


# ---- reductions

def dims_keepdims(dims):
    """(dim, keepdim) pairs; keepdim only with a dim."""
    return [(d, kd) for d in dims for kd in (False, True) if d is not None or not kd]


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "logsumexp"])
@pytest.mark.parametrize("dim,keepdim", dims_keepdims(REDUCE_DIMS), ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_reductions_cuda(cuda_leg, rng, name, dim, keepdim, dtype):
    a = randn(rng, 3, 4, 5, dtype=KILN_DTYPES[dtype][1])
    if dim is None:
        fn = getattr(kiln, name) if name in ("sum", "mean") else \
            (lambda x: getattr(kiln, name)(x, (0, 1, 2)))
    else:
        fn = lambda x: getattr(x, name)(dim=dim, keepdim=keepdim)  # noqa: E731
    check_on_cuda(cuda_leg, fn, a, grad=True, **RED)


@pytest.mark.parametrize("shape", [(1000,), (3, 5000), (257, 129)], ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "amax", "logsumexp"])
def test_long_reductions_cuda(cuda_leg, rng, shape, name):
    check_on_cuda(cuda_leg, lambda x: getattr(x, name)(-1), randn(rng, *shape), grad=True,
                  rtol=2e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_sum_integers_cuda(cuda_leg, rng, dtype):
    a = sample(rng, (6, 7), KILN_DTYPES[dtype][1])
    check_on_cuda(cuda_leg, lambda x: (kiln.sum(x), kiln.sum(x, 1)), a)


@pytest.mark.parametrize("dim,keepdim", dims_keepdims([None, 0, 1, -1]), ids=str)
def test_argmax_argmin_cuda(cuda_leg, rng, dim, keepdim):
    check_on_cuda(cuda_leg, lambda x: (kiln.argmax(x, dim, keepdim), x.argmin(dim, keepdim)),
                  randn(rng, 6, 9))


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_cuda(cuda_leg, rng, name, dim, keepdim):
    a = randn(rng, 5, 7)
    check_on_cuda(cuda_leg, lambda x: getattr(x, name)(dim, keepdim=keepdim), a, grad=True)
    check_on_cuda(cuda_leg, lambda x: getattr(kiln, name)(x), a)
    check_on_cuda(cuda_leg, getattr(kiln, name), a, randn(rng, 5, 7), grad=True)


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1), -1], ids=str)
@pytest.mark.parametrize("unbiased", [True, False])
def test_var_std_cuda(cuda_leg, rng, dim, unbiased):
    a = randn(rng, 6, 8) * 2 + 1
    check_on_cuda(cuda_leg, lambda x: (kiln.var(x, dim, unbiased=unbiased),
                                       kiln.std(x, dim, unbiased=unbiased)), a, grad=True,
                  rtol=1e-4, atol=1e-5)


# ---- softmax, log_softmax, layer_norm

@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_cuda(cuda_leg, rng, name, dim, dtype):
    a = randn(rng, 4, 5, 6, dtype=KILN_DTYPES[dtype][1]) * 3
    check_on_cuda(cuda_leg, lambda x: getattr(kiln, name)(x, dim), a, grad=True, **RED)


@pytest.mark.parametrize("cols", [7, 1024, 3000])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_long_rows_cuda(cuda_leg, rng, name, cols):
    check_on_cuda(cuda_leg, lambda x: getattr(kiln, name)(x, -1), randn(rng, 5, cols) * 3,
                  grad=True, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("affine", [(False, False), (True, False), (True, True)], ids=str)
@pytest.mark.parametrize("shape", [(8,), (4, 8), (1000,)], ids=str)
def test_layer_norm_cuda(cuda_leg, rng, affine, shape):
    a = randn(rng, 3, 4, *shape) * 2 + 0.5 if len(shape) == 1 else randn(rng, 3, *shape) * 2
    args = [a]
    args += [randn(rng, *shape)] if affine[0] else [None]
    args += [randn(rng, *shape)] if affine[1] else [None]
    check_on_cuda(cuda_leg, lambda x, w, b: kiln.layer_norm(x, shape, w, b, 1e-5), *args,
                  grad=True, rtol=1e-4, atol=1e-4)


# ---- matmul, linear, bmm

@pytest.mark.parametrize("sa,sb", [
    ((5, 7), (7, 3)), ((7,), (7, 3)), ((5, 7), (7,)), ((7,), (7,)),
    ((2, 5, 7), (7, 3)), ((2, 5, 7), (2, 7, 3)), ((4, 1, 5, 7), (3, 7, 2)),
    ((64, 96), (96, 80)), ((3, 33, 65), (3, 65, 17)),
], ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_cuda(cuda_leg, rng, sa, sb, dtype):
    nd = KILN_DTYPES[dtype][1]
    a, b = randn(rng, *sa, dtype=nd), randn(rng, *sb, dtype=nd)
    check_on_cuda(cuda_leg, lambda x, y: x @ y, a, b, grad=True, **GEMM)


@pytest.mark.parametrize("transpose", ["a", "b", "both"])
def test_matmul_transposed_views_cuda(cuda_leg, rng, transpose):
    a, b = randn(rng, 9, 6), randn(rng, 11, 9)

    def fn(x, y):
        x = x.t() if transpose in ("a", "both") else x.t().contiguous()
        y = y.t() if transpose in ("b", "both") else y.t().contiguous()
        return x @ y
    check_on_cuda(cuda_leg, fn, a, b, grad=True, **GEMM)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(6, 5), (2, 3, 5), (5,), (130, 5)], ids=str)
def test_linear_cuda(cuda_leg, rng, bias, shape):
    x, w = randn(rng, *shape), randn(rng, 4, 5)
    b = randn(rng, 4) if bias else None
    check_on_cuda(cuda_leg, kiln.linear, x, w, b, grad=True, **GEMM)


# ---- convolution, pooling, im2col

@pytest.mark.parametrize("stride,padding", [(1, 0), (2, 1), ((1, 2), (2, 0))], ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_cuda(cuda_leg, rng, stride, padding, bias):
    x, w = randn(rng, 2, 3, 9, 8), randn(rng, 4, 3, 3, 2)
    b = randn(rng, 4) if bias else None
    check_on_cuda(cuda_leg, lambda x, w, b: kiln.conv2d(x, w, b, stride, padding), x, w, b,
                  grad=True, rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("kernel,stride,padding", [(2, None, 0), (3, 2, 1), ((2, 3), (1, 2), 0)],
                         ids=str)
def test_pool2d_cuda(cuda_leg, rng, name, kernel, stride, padding):
    x = randn(rng, 2, 3, 9, 10)
    check_on_cuda(cuda_leg, lambda x: getattr(kiln, name)(x, kernel, stride, padding), x,
                  grad=True)


@pytest.mark.parametrize("kernel,stride,padding", [(3, 1, 0), (3, 2, 1), ((2, 3), (1, 2), 0)],
                         ids=str)
def test_im2col_col2im_cuda(cuda_leg, rng, kernel, stride, padding):
    x = randn(rng, 2, 3, 9, 10)
    cols = check_on_cuda(cuda_leg, lambda x: kiln.im2col(x, kernel, stride, padding), x,
                         grad=True)[0]
    c = randn(rng, *cols.shape)
    check_on_cuda(cuda_leg, lambda c: kiln.col2im(c, (9, 10), kernel, stride, padding), c,
                  grad=True, rtol=1e-5, atol=1e-5)


# ---- joining, splitting, indexing, views

@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
def test_cat_stack_dtypes_cuda(cuda_leg, rng, dim, dtype):
    parts = [sample(rng, (2, 3, 4), KILN_DTYPES[dtype][1]) for _ in range(3)]
    check_on_cuda(cuda_leg, lambda xs: kiln.cat(xs, dim), parts, grad=floating(dtype))
    check_on_cuda(cuda_leg, lambda xs: kiln.stack(xs, dim), parts, grad=floating(dtype))
    check_on_cuda(cuda_leg, lambda xs: kiln.cat([x.transpose(0, 2) for x in xs], dim), parts)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool", "float16"])
def test_cat_many_inputs_cuda(cuda_leg, rng, dtype):
    # 70 inputs (more than one launch of the one-kernel path), empty ones among them, and
    # widths that differ; stack of 0-d tensors as clip_grad_norm_ does it.
    np_dtype = np.float32 if dtype == "float16" else KILN_DTYPES[dtype][1]
    cast = (lambda x: x.to(kiln.float16)) if dtype == "float16" else (lambda x: x)
    widths = [int(w) for w in rng.integers(0, 4, 70)]
    parts = [sample(rng, (3, w, 2), np_dtype) for w in widths]
    check_on_cuda(cuda_leg, lambda xs: kiln.cat([cast(x) for x in xs], 1), parts,
                  grad=dtype in FLOATS)
    scalars = [np.asarray(sample(rng, (), np_dtype)) for _ in range(39)]
    check_on_cuda(cuda_leg, lambda xs: kiln.stack([cast(x) for x in xs]), scalars)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_stack_cuda(cuda_leg, rng, dim):
    parts = [randn(rng, 3, 4) for _ in range(3)]
    check_on_cuda(cuda_leg, lambda xs: kiln.cat(xs, dim), parts, grad=True)
    check_on_cuda(cuda_leg, lambda xs: kiln.stack(xs, dim), parts, grad=True)
    check_on_cuda(cuda_leg, lambda a, b: kiln.cat([a, b], 1), randn(rng, 3, 4),
                  randn(rng, 3, 2), grad=True)
    check_on_cuda(cuda_leg, lambda a, b: kiln.cat([a, b]), rng.integers(0, 5, (3, 4)),
                  randn(rng, 3, 4))


@pytest.mark.parametrize("chunks,dim", [(3, 0), (2, 1), (4, 1), (5, 0)])
def test_chunk_split_cuda(cuda_leg, rng, chunks, dim):
    a = randn(rng, 7, 6)
    check_on_cuda(cuda_leg, lambda x: [c * 1.0 for c in kiln.chunk(x, chunks, dim)], a,
                  grad=True)
    check_on_cuda(cuda_leg, lambda x: [s.contiguous() for s in x.split(2, dim)], a, grad=True)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32], ids=["int64", "int32"])
def test_index_select_cuda(cuda_leg, rng, dim, index_dtype):
    a = randn(rng, 5, 6, 4)
    idx = rng.integers(0, a.shape[dim], 7).astype(index_dtype)  # repeats: gradients add
    check_on_cuda(cuda_leg, lambda x, i: kiln.index_select(x, dim, i), a, idx, grad=True)


@pytest.mark.parametrize("rows", [10, 300])
def test_embedding_cuda(cuda_leg, rng, rows):
    w = randn(rng, rows, 4)
    idx = rng.integers(0, rows, (3, 5))
    check_on_cuda(cuda_leg, kiln.embedding, w, idx, grad=True)


def test_view_functions_cuda(cuda_leg, rng):
    a = randn(rng, 2, 3, 4)
    for fn in (lambda x: kiln.view(x, (6, 4)), lambda x: kiln.reshape(x, (4, -1)),
               lambda x: kiln.permute(x, (2, 0, 1)).contiguous(),
               lambda x: kiln.slice(x, 2, 1, 4, 2) * 1.0, lambda x: kiln.select(x, 1, -1) * 1.0,
               lambda x: kiln.expand(x[:, :1], (2, 5, 4)).contiguous(),
               lambda x: kiln.squeeze(x[:, :1], 1), lambda x: kiln.unsqueeze(x, -1),
               lambda x: kiln.transpose(x, 0, 2).contiguous(), lambda x: kiln.flatten(x, 1),
               lambda x: kiln.narrow(x, 2, 1, 2) + 0.0, lambda x: x[1:, ::2, [0, 3]],
               lambda x: x.t().contiguous() if x.dim() == 2 else x.transpose(1, 2) * 2):
        check_on_cuda(cuda_leg, fn, a, grad=True)


def test_masked_and_boolean_indexing_cuda(cuda_leg, rng):
    a = randn(rng, 5, 6)
    check_on_cuda(cuda_leg, lambda x: x[x > 0], NoGrad(a))
    check_on_cuda(cuda_leg, lambda x, m: kiln.where(m, x, 0.0).sum(0), a, a > 0.3, grad=True,
                  **RED)


# ---- the comparison machinery itself (runs everywhere, on the CPU)

def test_check_on_cuda_catches_mismatches(rng):
    """check_on_cuda's second call of fn is the device side: a function that answers
    differently there (value, dtype, shape, integer value, gradient alone) must fail."""
    a = randn(rng, 3, 4)

    def second_call_differs(good, bad):
        calls = []

        def fn(x):
            calls.append(x)
            return bad(x) if len(calls) == 2 else good(x)
        return fn

    def twice(x):
        return x * 2.0

    for good, bad, what in [
        (twice, lambda x: x * 2.0 + 1e-3, "output 0"),
        (twice, lambda x: twice(x).to(kiln.float64), "output 0: dtype"),
        (twice, lambda x: twice(x).reshape(4, 3), "output 0: shape"),
        (lambda x: twice(x).to(kiln.int64), lambda x: (twice(x) + 1.0).to(kiln.int64),
         "output 0"),
        (twice, lambda x: twice(x.detach()) + (x - x.detach()) * 0.5, "gradient of input 0"),
    ]:
        with pytest.raises(AssertionError, match=what):
            check_on_cuda("cpu", second_call_differs(good, bad), a * 10, grad=True)
    check_on_cuda("cpu", second_call_differs(twice, twice), a, grad=True)  # agreeing: passes
