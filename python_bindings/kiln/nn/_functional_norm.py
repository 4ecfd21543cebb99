"""Normalizations of kiln.nn.functional: batch_norm, instance_norm, group_norm,
rms_norm, normalize, composed of kiln ops (mean, var, rsqrt, ...), so autograd runs
through them and the tracer fuses their pointwise parts. Running statistics are
updated in place without history, as PyTorch's: mean with momentum, var unbiased."""

from .. import _kiln as _C

__all__ = ["batch_norm", "instance_norm", "group_norm", "rms_norm", "normalize"]


def _no_grad():
    from .._functions import no_grad

    return no_grad()


def _channel_shape(input):
    """(1, C, 1, ...) for per-channel tensors broadcast against input (N, C, ...)."""
    return (1, input.shape[1]) + (1,) * (input.ndim - 2)


def _affine(y, weight, bias, shape):
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _update(running, value, momentum):
    with _no_grad():
        running.copy_(running * (1.0 - momentum) + value.detach().to(running.dtype) * momentum)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Normalizes each channel (dim 1) over the batch and spatial dims: with the batch's
    statistics when training (then running_mean / running_var, if given, move towards
    them by momentum, the variance unbiased), else with the running statistics."""
    if input.ndim < 2:
        raise _C.KilnValueError(f"batch_norm: expected input with at least 2 dims (N, C, ...), "
                                f"got {input.ndim}D")
    shape = _channel_shape(input)
    dims = (0,) + tuple(range(2, input.ndim))
    if training:
        count = input.numel() // input.shape[1]
        if count <= 1:
            raise _C.KilnValueError(f"batch_norm: Expected more than 1 value per channel when "
                                    f"training, got input size {list(input.shape)}")
        mean = input.mean(dims, keepdim=True)
        var = input.var(dims, correction=0, keepdim=True)
        if running_mean is not None:
            _update(running_mean, mean.reshape(-1), momentum)
        if running_var is not None:
            _update(running_var, var.reshape(-1) * (count / (count - 1)), momentum)
    else:
        if running_mean is None or running_var is None:
            raise _C.KilnValueError("batch_norm: running_mean and running_var must be given "
                                    "when training=False")
        mean = running_mean.reshape(shape)
        var = running_var.reshape(shape)
    y = (input - mean) * _C.rsqrt(var + eps)
    return _affine(y, weight, bias, shape)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Normalizes each (sample, channel) over its spatial dims; running statistics (if
    given) move towards the batch mean of the per-instance statistics."""
    if input.ndim < 3:
        raise _C.KilnValueError(f"instance_norm: expected input (N, C, ...) with at least 3 "
                                f"dims, got {input.ndim}D")
    shape = _channel_shape(input)
    dims = tuple(range(2, input.ndim))
    if use_input_stats:
        count = 1
        for d in dims:
            count *= input.shape[d]
        if count <= 1:
            raise _C.KilnValueError(f"instance_norm: Expected more than 1 spatial element when "
                                    f"training, got input size {list(input.shape)}")
        mean = input.mean(dims, keepdim=True)
        var = input.var(dims, correction=0, keepdim=True)
        if running_mean is not None:
            _update(running_mean, mean.reshape(input.shape[:2]).mean(0), momentum)
        if running_var is not None:
            unbiased = var.reshape(input.shape[:2]) * (count / (count - 1))
            _update(running_var, unbiased.mean(0), momentum)
    else:
        mean = running_mean.reshape(shape)
        var = running_var.reshape(shape)
    y = (input - mean) * _C.rsqrt(var + eps)
    return _affine(y, weight, bias, shape)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalizes each sample's channels in num_groups groups (over the group's channels
    and the spatial dims), then the per-channel affine."""
    if input.ndim < 2:
        raise _C.KilnValueError(f"group_norm: expected input (N, C, ...) with at least 2 "
                                f"dims, got {input.ndim}D")
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise _C.KilnValueError(f"group_norm: Expected number of channels in input to be "
                                f"divisible by num_groups, but got input of shape "
                                f"{list(input.shape)} and num_groups={num_groups}")
    x = input.reshape(n, num_groups, -1)
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, correction=0, keepdim=True)
    y = ((x - mean) * _C.rsqrt(var + eps)).reshape(tuple(input.shape))
    return _affine(y, weight, bias, _channel_shape(input))


_EPS = {"float32": 1.1920928955078125e-07, "float64": 2.220446049250313e-16,
        "float16": 0.0009765625, "bfloat16": 0.0078125}


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2 over the normalized_shape dims) + eps) * weight; eps defaults
    to the dtype's machine epsilon (torch.finfo(dtype).eps), as PyTorch's."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    k = len(normalized_shape)
    if tuple(input.shape[input.ndim - k:]) != tuple(normalized_shape):
        raise _C.KilnRuntimeError(f"rms_norm: Given normalized_shape={list(normalized_shape)}, "
                                  f"expected input with shape [*, "
                                  f"{', '.join(map(str, normalized_shape))}], but got input of "
                                  f"size{list(input.shape)}")
    if eps is None:
        eps = _EPS.get(input.dtype.name, _EPS["float32"])
    dims = tuple(range(input.ndim - k, input.ndim))
    y = input * _C.rsqrt((input * input).mean(dims, keepdim=True) + eps)
    return y * weight if weight is not None else y


def normalize(input, p=2.0, dim=1, eps=1e-12):
    """input / max(||input||_p over dim, eps)."""
    if p == 2:
        norm = _C.sqrt((input * input).sum(dim, keepdim=True))
    elif p == 1:
        norm = input.abs().sum(dim, keepdim=True)
    elif p == float("inf"):
        norm = input.abs().amax(dim, keepdim=True)
    else:
        norm = (input.abs() ** p).sum(dim, keepdim=True) ** (1.0 / p)
    return input / _C.clamp(norm, eps, None)
