"""Conv/Linear + BatchNorm folding for inference, as torch.nn.utils.fusion: an eval-mode
BatchNorm after a conv (or linear) layer is an affine map per output channel,
    bn(y) = (y - running_mean) * weight / sqrt(running_var + eps) + bias,
so it folds into the layer's weight (scaled per output channel) and bias. The fused
layer is a copy; the originals are untouched. Missing conv bias or BatchNorm affine
parameters count as 0 (bias) and 1 (weight), as PyTorch's."""

import copy

from ... import _kiln as _C
from ..modules.module import Parameter

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
           "fuse_linear_bn_weights"]


def _check_eval(layer, bn):
    # PyTorch asserts here (AssertionError), so does kiln.
    assert not (layer.training or bn.training), "Fusion only for eval!"


def _scale(bn_rv, bn_eps, bn_w):
    """bn_w / sqrt(bn_rv + eps): the BatchNorm's multiplier per channel."""
    inv_std = _C.rsqrt(bn_rv + bn_eps)
    return inv_std if bn_w is None else bn_w * inv_std


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose=False):
    """The (weight, bias) Parameters of a conv followed by an eval BatchNorm. The output
    channels are weight dim 0 of a convolution, dim 1 of a transposed one."""
    scale = _scale(bn_rv, bn_eps, bn_w)
    rank = len(conv_w.shape)
    shape = ([1, -1] if transpose else [-1, 1]) + [1] * (rank - 2)
    fused_w = conv_w * scale.reshape(shape)
    shifted = -bn_rm if conv_b is None else conv_b - bn_rm
    fused_b = shifted * scale if bn_b is None else shifted * scale + bn_b
    return Parameter(fused_w), Parameter(fused_b)


def fuse_conv_bn_eval(conv, bn, transpose=False):
    """A copy of `conv` (Conv1d/2d, or a transposed conv with transpose=True) whose
    output equals bn(conv(x)) for eval-mode conv and bn."""
    _check_eval(conv, bn)
    fused = copy.deepcopy(conv)
    fused.weight, fused.bias = fuse_conv_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight,
        bn.bias, transpose)
    return fused


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """The (weight, bias) Parameters of a Linear followed by an eval BatchNorm1d."""
    return fuse_conv_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b)


def fuse_linear_bn_eval(linear, bn):
    """A copy of `linear` whose output equals bn(linear(x)) for eval-mode modules."""
    _check_eval(linear, bn)
    fused = copy.deepcopy(linear)
    fused.weight, fused.bias = fuse_linear_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
    return fused
