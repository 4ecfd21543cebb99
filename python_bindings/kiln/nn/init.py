"""kiln.nn.init: in-place initializers (PyTorch's formulas) drawing from kiln.rand /
kiln.randn, so kiln.manual_seed makes them reproducible."""

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
