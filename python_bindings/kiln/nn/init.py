"""kiln.nn.init: in-place initializers (PyTorch's formulas) drawing from kiln.rand /
kiln.randn, so kiln.manual_seed makes them reproducible. orthogonal_ takes its QR on
the host (numpy); trunc_normal_ inverts the normal CDF with kiln's erf."""

import math

from .. import _kiln as _C


def _no_grad(fn):
    """Initializers write parameters in place without recording history (as
    torch.nn.init does under torch.no_grad())."""

    def wrapper(*args, **kwargs):
        prev = _C.is_grad_enabled()
        _C.set_grad_enabled_(False)
        try:
            return fn(*args, **kwargs)
        finally:
            _C.set_grad_enabled_(prev)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _fill_from(tensor, values):
    return tensor.copy_(values)


@_no_grad
def uniform_(tensor, a=0.0, b=1.0):
    u = _C.rand(tuple(tensor.shape), dtype=_float(tensor), device=tensor.device)
    return _fill_from(tensor, u * (b - a) + a)


@_no_grad
def normal_(tensor, mean=0.0, std=1.0):
    n = _C.randn(tuple(tensor.shape), dtype=_float(tensor), device=tensor.device)
    return _fill_from(tensor, n * std + mean)


@_no_grad
def constant_(tensor, val):
    return tensor.fill_(val)


@_no_grad
def zeros_(tensor):
    return tensor.zero_()


@_no_grad
def ones_(tensor):
    return tensor.fill_(1)


def _float(tensor):
    return tensor.dtype if tensor.dtype.is_floating_point else _C.float32


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.ndim < 2:
        raise _C.KilnValueError("Fan in and fan out can not be computed for tensor with fewer "
                                "than 2 dimensions")
    receptive = 1
    for s in tuple(tensor.shape)[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def calculate_gain(nonlinearity, param=None):
    if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise _C.KilnValueError(f"Unsupported nonlinearity {nonlinearity}")


@_no_grad
def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    gain = calculate_gain(nonlinearity, a)
    bound = math.sqrt(3.0) * gain / math.sqrt(fan) if fan else 0.0
    return uniform_(tensor, -bound, bound)


@_no_grad
def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0
    return normal_(tensor, 0.0, std)


@_no_grad
def xavier_uniform_(tensor, gain=1.0):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


@_no_grad
def xavier_normal_(tensor, gain=1.0):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _erfinv(y):
    """erf^-1(y) for y in (-1, 1): Giles' approximation refined by Newton steps on erf."""
    w = -_C.log((1.0 - y) * (1.0 + y))
    small = w < 5.0
    ws = w - 2.5
    wl = _C.sqrt(_C.where(small, 5.0, w)) - 3.0
    ps = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        ps = ps * ws + c
    pl = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        pl = pl * wl + c
    x = _C.where(small, ps, pl) * y
    for _ in range(3):  # Newton: erf(x) = y
        x = x - (_C.erf(x) - y) / (1.1283791670955126 * _C.exp(-x * x))
    return x


@_no_grad
def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """Normal(mean, std) restricted to [a, b], by inverting the normal CDF of a uniform
    draw between CDF(a) and CDF(b) (PyTorch's method)."""
    if mean < a - 2 * std or mean > b + 2 * std:
        import warnings

        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The "
                      "distribution of values may be incorrect.", stacklevel=2)

    def cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    dtype = _C.float64 if tensor.dtype == _C.float64 else _C.float32
    u = _C.rand(tuple(tensor.shape), dtype=dtype, device=tensor.device)
    y = _C.clamp(u * (2 * hi - 2 * lo) + (2 * lo - 1), -1.0 + 1e-7, 1.0 - 1e-7)
    x = _erfinv(y) * (std * math.sqrt(2.0)) + mean
    return tensor.copy_(_C.clamp(x, a, b))


@_no_grad
def orthogonal_(tensor, gain=1.0):
    """A (semi-)orthogonal matrix (QR of a normal draw, signs fixed by R's diagonal, as
    PyTorch), reshaped to tensor's shape and scaled by gain."""
    import numpy as np

    if tensor.ndim < 2:
        raise _C.KilnValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _C.randn((rows, cols), dtype=_C.float64).numpy()
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    values = _tensor_from_numpy(np.ascontiguousarray(q * gain))
    return tensor.copy_(values.reshape(tuple(tensor.shape)).to(tensor.dtype).to(tensor.device))


def _tensor_from_numpy(arr):
    from .._functions import from_numpy

    return from_numpy(arr)


@_no_grad
def eye_(tensor):
    """The identity matrix (2-D tensors)."""
    if tensor.ndim != 2:
        raise _C.KilnValueError("Only tensors with 2 dimensions are supported")
    rows = _C.arange(tensor.shape[0], device=tensor.device).unsqueeze(1)
    cols = _C.arange(tensor.shape[1], device=tensor.device).unsqueeze(0)
    return tensor.copy_((rows == cols).to(tensor.dtype))


@_no_grad
def dirac_(tensor, groups=1):
    """The Dirac delta (identity convolution) in 3-, 4- or 5-D conv weights."""
    import numpy as np

    if tensor.ndim not in (3, 4, 5):
        raise _C.KilnValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tuple(tensor.shape)
    if sizes[0] % groups:
        raise _C.KilnValueError("dim 0 must be divisible by groups")
    out_per_group = sizes[0] // groups
    values = np.zeros(sizes)
    centre = tuple(s // 2 for s in sizes[2:])
    for g in range(groups):
        for d in range(min(out_per_group, sizes[1])):
            values[(g * out_per_group + d, d) + centre] = 1
    return tensor.copy_(_tensor_from_numpy(values).to(tensor.dtype).to(tensor.device))


@_no_grad
def sparse_(tensor, sparsity, std=0.01):
    """Normal(0, std) with a fraction sparsity of each column's entries zeroed."""
    if tensor.ndim != 2:
        raise _C.KilnValueError("Only tensors with 2 dimensions are supported")
    from .._random import randperm

    rows, cols = tuple(tensor.shape)
    num_zeros = int(math.ceil(sparsity * rows))
    normal_(tensor, 0.0, std)
    values = tensor.cpu().numpy().copy()
    for c in range(cols):
        values[randperm(rows).numpy()[:num_zeros], c] = 0
    return tensor.copy_(_tensor_from_numpy(values).to(tensor.device))


# torch.nn.init's deprecated spellings without the trailing underscore
uniform, normal, constant, xavier_uniform, xavier_normal = (
    uniform_, normal_, constant_, xavier_uniform_, xavier_normal_)
kaiming_uniform, kaiming_normal, orthogonal, sparse, eye, dirac = (
    kaiming_uniform_, kaiming_normal_, orthogonal_, sparse_, eye_, dirac_)
