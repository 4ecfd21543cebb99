"""Activations of kiln.nn.functional beyond the op table's (leaky_relu, elu, selu,
celu, softplus, hardtanh, relu6, hardsigmoid, hardswish, mish, logsigmoid, softsign,
tanhshrink, glu, prelu, threshold, hardshrink, softshrink, softmin), composed of
pointwise kiln ops so they fuse. expm1 is computed with Kahan's correction
(accurate near 0, where exp(x) - 1 loses every digit); log1p is an op."""

from .. import _kiln as _C

__all__ = ["leaky_relu", "elu", "selu", "celu", "softplus", "hardtanh", "relu6",
           "hardsigmoid", "hardswish", "mish", "logsigmoid", "softsign", "tanhshrink", "glu",
           "prelu", "threshold", "hardshrink", "softshrink", "softmin"]


log1p = _C.log1p  # the op (ops.def row Log1p), fused like every pointwise op


def expm1(x):
    """exp(x) - 1, accurate for small x: (u - 1) * x / log(u) with u = exp(x); beyond
    |x| > 0.5 the plain form is exact enough. Each branch sees only the inputs it is
    chosen for, so no inf / nan reaches the gradient from the other."""
    big = _C.abs(x) > 0.5
    xs = _C.where(big, 0.25, x)
    u = _C.exp(xs)
    d = u - 1.0
    lg = _C.log(u)
    exact = (d == 0) | (lg == 0)
    small = _C.where(exact, xs, d * xs / _C.where(exact, 1.0, lg))
    return _C.where(big, _C.exp(x) - 1.0, small)


def _out(input, result, inplace):
    if inplace and not (input.requires_grad and _C.is_grad_enabled()):
        return input.copy_(result)
    return result


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _out(input, _C.where(input > 0, input, input * negative_slope), inplace)


def _neg_expm1(x):
    """expm1 of the negative part (0 elsewhere: no inf from exp of large x reaches a
    gradient through the branch where() drops)."""
    return expm1(_C.clamp(x, None, 0.0))


def elu(input, alpha=1.0, inplace=False):
    return _out(input, _C.where(input > 0, input, alpha * _neg_expm1(input)), inplace)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    y = _SELU_SCALE * _C.where(input > 0, input, _SELU_ALPHA * _neg_expm1(input))
    return _out(input, y, inplace)


def celu(input, alpha=1.0, inplace=False):
    return _out(input, _C.where(input > 0, input, alpha * _neg_expm1(input / alpha)), inplace)


def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold."""
    z = input * beta
    pos = z > 0
    zp = _C.where(pos, z, 0.0)  # each branch sees only its own inputs (no inf in gradients)
    zn = _C.where(pos, 0.0, z)
    soft = _C.where(pos, zp + log1p(_C.exp(-zp)), log1p(_C.exp(zn))) / beta
    return _C.where(z > threshold, input, soft)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if min_val > max_val:
        raise _C.KilnValueError(f"hardtanh: min_val ({min_val}) cannot be greater than max_val "
                                f"({max_val})")
    return _out(input, _C.clamp(input, min_val, max_val), inplace)


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def hardsigmoid(input, inplace=False):
    return _out(input, _C.clamp(input + 3.0, 0.0, 6.0) / 6.0, inplace)


def hardswish(input, inplace=False):
    return _out(input, input * _C.clamp(input + 3.0, 0.0, 6.0) / 6.0, inplace)


def mish(input, inplace=False):
    return _out(input, input * _C.tanh(softplus(input)), inplace)


def logsigmoid(input):
    return -softplus(-input)


def softsign(input):
    return input / (1.0 + _C.abs(input))


def tanhshrink(input):
    return input - _C.tanh(input)


def glu(input, dim=-1):
    """a * sigmoid(b), a and b the two halves of input along dim."""
    if input.shape[dim] % 2:
        raise _C.KilnRuntimeError(f"glu: Halving dimension must be even, but dimension {dim} is "
                                  f"size {input.shape[dim]}")
    a, b = input.chunk(2, dim)
    return a * _C.sigmoid(b)


def prelu(input, weight):
    """max(0, x) + weight * min(0, x), weight per channel (dim 1) or one value."""
    if weight.numel() != 1:
        if input.ndim < 2 or input.shape[1] != weight.numel():
            raise _C.KilnRuntimeError(f"prelu: Mismatch of parameter numbers and input channel "
                                      f"size. Found parameter numbers = {weight.numel()} and "
                                      f"channel size = "
                                      f"{input.shape[1] if input.ndim > 1 else 1}.")
        weight = weight.reshape((1, -1) + (1,) * (input.ndim - 2))
    return _C.where(input > 0, input, weight * input)


def threshold(input, threshold, value, inplace=False):
    return _out(input, _C.where(input > threshold, input, value), inplace)


def hardshrink(input, lambd=0.5):
    return _C.where(_C.abs(input) > lambd, input, 0.0)


def softshrink(input, lambd=0.5):
    return _C.where(input > lambd, input - lambd, _C.where(input < -lambd, input + lambd, 0.0))


def softmin(input, dim=None, dtype=None):
    from .functional import softmax

    return softmax(-input, dim, dtype)
