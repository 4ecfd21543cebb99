"""kiln.nn.functional: the PyTorch functional API over kiln ops.

Everything here is composed from kiln ops, so it runs on the CPU and CUDA alike and
the tracer sees the ops one by one.
"""

import math

from .. import _autocast, _functions
from .. import _kiln as _C
from ._functional_act import *  # noqa: F401,F403
from ._functional_act import __all__ as _act_all
from ._functional_norm import (  # noqa: F401
    batch_norm, group_norm, instance_norm, normalize, rms_norm)
from ._functional_spatial import *  # noqa: F401,F403
from ._functional_spatial import __all__ as _spatial_all
from ._functional_conv import conv_transpose1d, conv_transpose2d  # noqa: F401
from ._functional_conv import grouped_conv2d as _grouped_conv2d

__all__ = [
    "relu", "relu_", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax",
    "layer_norm", "linear", "dropout", "conv2d", "max_pool2d", "avg_pool2d",
    "cross_entropy", "nll_loss", "mse_loss", "embedding", "one_hot",
    "scaled_dot_product_attention", "binary_cross_entropy_with_logits", "binary_cross_entropy",
    "batch_norm", "instance_norm", "group_norm", "rms_norm", "normalize",
    "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "conv_transpose1d", "conv_transpose2d",
] + _act_all + _spatial_all


def _in_place_ok(input):
    """In place only when no gradient needs the overwritten value (kiln's autograd
    rules read their inputs, so an in-place activation on a tensor with history runs
    out of place instead)."""
    return not (input.requires_grad and _C.is_grad_enabled())


def relu(input, inplace=False):
    return input.relu_() if inplace and _in_place_ok(input) else _C.relu(input)


def relu_(input):
    return input.relu_()


def gelu(input, approximate="none"):
    """GELU; approximate='tanh' uses 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return _C.gelu(input, approximate)


def silu(input, inplace=False):
    out = _C.silu(input)
    return input.copy_(out) if inplace and _in_place_ok(input) else out


def sigmoid(input):
    return _C.sigmoid(input)


def tanh(input):
    return _C.tanh(input)


def _softmax_dim(input, dim):
    if dim is None:  # PyTorch's legacy implicit choice
        return 0 if input.ndim in (0, 1, 3) else 1
    return dim


def softmax(input, dim=None, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    return _C.softmax(input, _softmax_dim(input, dim))


def log_softmax(input, dim=None, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    return _C.log_softmax(input, _softmax_dim(input, dim))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return _C.layer_norm(input, tuple(normalized_shape), weight, bias, float(eps))


def linear(input, weight, bias=None):
    """input @ weight.T + bias (weight: [out_features, in_features])."""
    if _autocast._active[0]:
        input, weight, bias = _autocast.lower(input, weight, bias)
    return _C.linear(input, weight, bias)


def dropout(input, p=0.5, training=True, inplace=False):
    """Zeroes elements with probability p (kiln.rand) and scales the rest by 1/(1-p);
    the identity when not training."""
    if p < 0.0 or p > 1.0:
        raise _C.KilnValueError(f"[dropout] probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        out = input * 0
    else:
        keep = _C.rand(tuple(input.shape), dtype=input.dtype if input.dtype.is_floating_point
                       else _C.float32, device=input.device) >= p
        out = _C.where(keep, input * (1.0 / (1.0 - p)), 0.0)
    return input.copy_(out) if inplace else out


def _check_unit(name, op, value, unit):
    values = value if isinstance(value, (tuple, list)) else (value,)
    if any(v != unit for v in values):
        raise _C.KilnValueError(f"[{op}] {name}={value} is not supported (only {unit})")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    _check_unit("dilation", "conv2d", dilation, 1)
    if isinstance(padding, str):
        raise _C.KilnValueError(f"[conv2d] padding='{padding}' is not supported; give ints")
    if _autocast._active[0]:
        input, weight, bias = _autocast.lower(input, weight, bias)
    if groups != 1:  # im2col and a batched matmul over the groups (_functional_conv.py)
        return _grouped_conv2d(input, weight, bias, stride, padding, groups)
    return _C.conv2d(input, weight, bias, stride, padding)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    _check_unit("dilation", "max_pool2d", dilation, 1)
    if ceil_mode or return_indices:
        raise _C.KilnValueError("[max_pool2d] ceil_mode and return_indices are not supported")
    return _C.max_pool2d(input, kernel_size, stride, padding)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    if ceil_mode or not count_include_pad or divisor_override is not None:
        raise _C.KilnValueError("[avg_pool2d] only ceil_mode=False, count_include_pad=True and "
                                "no divisor_override are supported")
    return _C.avg_pool2d(input, kernel_size, stride, padding)


def embedding(input, weight, padding_idx=None, max_norm=None, **unused):
    """Rows of weight picked by the integer tensor input (any shape)."""
    if max_norm is not None:
        raise _C.KilnValueError("[embedding] max_norm is not supported")
    return _C.embedding(weight, input)


def one_hot(tensor, num_classes=-1):
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1
    classes = _C.arange(num_classes, device=tensor.device)
    return (tensor.unsqueeze(-1) == classes).to(_C.int64)


def _class_dim_last(input):
    """(N, C, d1, ...) -> (N * d1 * ..., C); (C,) -> (1, C)."""
    if input.ndim == 1:
        return input.unsqueeze(0)
    if input.ndim == 2:
        return input
    return input.movedim(1, -1).reshape(-1, input.shape[1])


def _divide_by_weight(total, weight_sum):
    """total / weight_sum for a 'mean' over targets, as PyTorch: nan when every target is
    ignored (weight_sum 0), and then a zero gradient, not 0 * inf (PyTorch's backward
    never writes the ignored rows)."""
    none = weight_sum == 0
    inverse = _C.where(none, 0.0, 1.0 / _C.where(none, 1.0, weight_sum))
    return total * inverse + _C.where(none, float("nan"), 0.0)


def _reduce(loss, reduction, weight_sum=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        if weight_sum is None:
            return loss.mean()
        return _divide_by_weight(loss.sum(), weight_sum)
    raise _C.KilnValueError(f"[loss] reduction must be 'none', 'mean' or 'sum', got '{reduction}'")


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """Negative log likelihood of log-probabilities input (N, C[, d...]) at class
    indices target (N[, d...]); 'mean' averages over the non-ignored targets (weighted)."""
    if _autocast._active[0]:
        input, weight = _autocast.float32(input, weight)
    out_shape = tuple(target.shape)
    logp = _class_dim_last(input)
    tgt = target.reshape(-1)
    num_classes = logp.shape[1]
    if tgt.dtype.is_floating_point:
        raise _C.DTypeError("[nll_loss] target must hold class indices (an integer tensor)")
    classes = _C.arange(num_classes, device=logp.device)
    hit = tgt.unsqueeze(1) == classes  # (N, C) one-hot, no row for ignored targets
    picked = _C.where(hit, logp, 0.0).sum(1)
    valid = (tgt != ignore_index).to(logp.dtype)
    w = valid
    if weight is not None:
        w = _C.where(hit, weight.unsqueeze(0), 0.0).sum(1) * valid
    loss = -picked * w
    if reduction == "none":
        return loss.reshape(out_shape)
    return _reduce(loss, reduction, w.sum() if reduction == "mean" else None)


def _target_weights(target, weight, ignore_index, num_classes, dtype):
    """Per target: weight[target] (1 without weights), 0 where target == ignore_index."""
    valid = (target != ignore_index).to(dtype)
    if weight is None:
        return valid
    classes = _C.arange(num_classes, device=target.device)
    hit = target.unsqueeze(-1) == classes
    return _C.where(hit, weight, 0.0).sum(-1) * valid


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0):
    """log_softmax over the class dim (1, or 0 for a single sample) then nll_loss; a
    floating target of input's shape is taken as class probabilities. label_smoothing
    follows PyTorch: (1 - s) * nll + s / C * (the smoothing term -sum_c w_c log p_c,
    zero at ignored targets, reduced like nll: 'mean' divides by the targets' weight)."""
    if _autocast._active[0]:
        input, target, weight = _autocast.float32(input, target, weight)
    class_dim = 0 if input.ndim == 1 else 1
    num_classes = input.shape[class_dim]
    logp = _C.log_softmax(input, class_dim)
    weight_b = None
    if weight is not None:
        weight_b = weight.reshape((-1,) + (1,) * (input.ndim - class_dim - 1))
    if target.dtype.is_floating_point:
        if label_smoothing:
            target = target * (1.0 - label_smoothing) + label_smoothing / num_classes
        if weight_b is not None:
            logp = logp * weight_b
        loss = -(target * logp).sum(class_dim)
        return _reduce(loss, reduction)
    if label_smoothing:
        nll = nll_loss(logp, target, weight, ignore_index, reduction)
        smooth = -(logp * weight_b if weight_b is not None else logp).sum(class_dim)
        smooth = _C.where(target != ignore_index, smooth, 0.0)
        if reduction == "mean":
            w = _target_weights(target, weight, ignore_index, num_classes, smooth.dtype)
            smooth = _divide_by_weight(smooth.sum(), w.sum())
        else:
            smooth = _reduce(smooth, reduction)
        return (1.0 - label_smoothing) * nll + smooth * (label_smoothing / num_classes)
    return nll_loss(logp, target, weight, ignore_index, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean",
                                     pos_weight=None):
    """BCE of sigmoid(input) against target in the stable form
    max(x, 0) - x * y + log(1 + exp(-|x|)) (ops/losses.cpp)."""
    if _autocast._active[0]:
        input, target, weight, pos_weight = _autocast.float32(input, target, weight,
                                                               pos_weight)
    if weight is None and pos_weight is None:
        return _C.binary_cross_entropy_with_logits(input, target, reduction)
    log_sig = -_C.binary_cross_entropy_with_logits(input, _functions.ones_like(input), "none")
    log_one_minus = -_C.binary_cross_entropy_with_logits(input, _functions.zeros_like(input), "none")
    pw = 1.0 if pos_weight is None else pos_weight
    loss = -(pw * target * log_sig + (1 - target) * log_one_minus)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """-(y log p + (1 - y) log(1 - p)) with the logs clamped at -100 like PyTorch."""
    if _autocast._active[0]:
        input, target, weight = _autocast.float32(input, target, weight)
    loss = -(target * _C.clamp(_C.log(input), -100.0, None)
             + (1 - target) * _C.clamp(_C.log(1 - input), -100.0, None))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def mse_loss(input, target, reduction="mean"):
    if _autocast._active[0]:
        input, target = _autocast.float32(input, target)
    d = input - target
    return _reduce(d * d, reduction)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None):
    """softmax(q @ k^T * scale + mask) @ v over the last two dims: one fused op (forward
    and backward, ops/attention_layout.h; the C++ side takes the composite where a device
    has no kernel for the inputs). dropout_p > 0 drops attention weights as dropout()
    does (inside the fused kernels on CUDA), whether or not the module is training, as
    PyTorch's function does."""
    if _autocast._active[0]:
        query, key, value = _autocast.lower(query, key, value)
    if not 0.0 <= dropout_p <= 1.0:
        raise _C.KilnValueError(
            f"[scaled_dot_product_attention] dropout_p must be in [0, 1], got {dropout_p}")
    return _C.scaled_dot_product_attention(query, key, value, attn_mask, is_causal, scale,
                                           float(dropout_p))


def _check_same_shape(op, input, target):
    if tuple(input.shape) != tuple(target.shape):
        import warnings

        warnings.warn(f"Using a target size ({list(target.shape)}) that is different to the "
                      f"input size ({list(input.shape)}) in {op}. This will likely lead to "
                      "incorrect results due to broadcasting. Please ensure they have the same "
                      "size.", stacklevel=3)


def l1_loss(input, target, reduction="mean"):
    if _autocast._active[0]:
        input, target = _autocast.float32(input, target)
    _check_same_shape("l1_loss", input, target)
    return _reduce(_C.abs(input - target), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta)."""
    if _autocast._active[0]:
        input, target = _autocast.float32(input, target)
    _check_same_shape("huber_loss", input, target)
    d = _C.abs(input - target)
    return _reduce(_C.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta=0: l1_loss)."""
    if beta < 0:
        raise _C.KilnRuntimeError("smooth_l1_loss does not support negative values for beta.")
    if _autocast._active[0]:
        input, target = _autocast.float32(input, target)
    _check_same_shape("smooth_l1_loss", input, target)
    d = _C.abs(input - target)
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(_C.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Pointwise KL divergence of log-probabilities input from target (probabilities, or
    log-probabilities when log_target); 'batchmean' divides the sum by the batch size."""
    if _autocast._active[0]:
        input, target = _autocast.float32(input, target)
    if log_target:
        loss = _C.exp(target) * (target - input)
    else:
        pos = target > 0
        loss = _C.where(pos, target * _C.log(_C.where(pos, target, 1.0)), 0.0) - target * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    if reduction == "mean":
        import warnings

        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the "
                      "support size.'batchmean' divides only by the batch size, and aligns with "
                      "the KL div math definition.'mean' will be changed to behave the same as "
                      "'batchmean' in the next major release.", stacklevel=2)
    return _reduce(loss, reduction)
