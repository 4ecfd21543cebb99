"""Transposed and grouped convolutions of kiln.nn.functional, composed of kiln ops (so
autograd, the tracer and both devices come with them): conv_transpose2d is a matmul of
the weight with the input's pixels followed by col2im (the scatter-add of overlapping
patches, the op conv2d's backward uses); conv_transpose1d runs it on a height-1 image.
A grouped conv2d (groups > 1, depthwise included) is im2col followed by one batched
matmul over the groups. dilation other than 1 is not supported (raises)."""

from .. import _kiln as _C

__all__ = ["conv_transpose1d", "conv_transpose2d", "grouped_conv2d"]


def _pair(v, name, op, n=2):
    t = tuple(v) if isinstance(v, (tuple, list)) else (v,) * n
    if len(t) != n or not all(isinstance(x, int) and not isinstance(x, bool) for x in t):
        raise _C.KilnValueError(f"{op}: {name} must be an int or a tuple of {n} ints, got {v!r}")
    return t


def _check(input, weight, groups, stride, padding, output_padding, dilation, op, nd):
    if not isinstance(input, _C.Tensor) or not isinstance(weight, _C.Tensor):
        raise TypeError(f"{op}(): argument 'input' and 'weight' must be Tensors")
    if input.ndim not in (nd + 1, nd + 2):
        raise _C.KilnRuntimeError(
            f"{op}: Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {op}, but "
            f"got input of size: {list(input.shape)}")
    if weight.ndim != nd + 2:
        raise _C.KilnRuntimeError(f"{op}: weight should have {nd + 2} dimensions, got weight of "
                                  f"size {list(weight.shape)}")
    if any(d != 1 for d in dilation):
        raise _C.KilnValueError(f"[{op}] dilation={dilation} is not supported (only 1)")
    if groups < 1 or weight.shape[0] % groups:
        raise _C.KilnRuntimeError(f"{op}: groups={groups} must be positive and divide the "
                                  f"weight's in_channels ({weight.shape[0]})")
    channels = input.shape[-nd - 1]
    if channels != weight.shape[0]:
        raise _C.KilnRuntimeError(
            f"{op}: Given transposed=1, weight of size {list(weight.shape)}, expected "
            f"input{list(input.shape)} to have {weight.shape[0]} channels, but got {channels} "
            "channels instead")
    if any(s < 1 for s in stride) or any(p < 0 for p in padding):
        raise _C.KilnRuntimeError(f"{op}: stride must be positive and padding non-negative, "
                                  f"got stride={stride}, padding={padding}")
    if any(o < 0 or o >= s for o, s in zip(output_padding, stride)):
        raise _C.KilnRuntimeError(f"{op}: output padding must be smaller than either stride or "
                                  f"dilation, but got output_padding={output_padding}, "
                                  f"stride={stride}")


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Over (N, C_in, H, W) (or unbatched) with weight (C_in, C_out / groups, kH, kW):
    output (N, C_out, (H - 1) * stride - 2 * padding + kH + output_padding, ...)."""
    op = "conv_transpose2d"
    stride, padding = _pair(stride, "stride", op), _pair(padding, "padding", op)
    output_padding = _pair(output_padding, "output_padding", op)
    _check(input, weight, groups, stride, padding, output_padding, _pair(dilation, "dilation", op),
           op, 2)
    batched = input.ndim == 4
    x = input if batched else input.unsqueeze(0)
    n, c_in, h, w = x.shape
    _, c_out_g, kh, kw = weight.shape
    size = tuple((i - 1) * s - 2 * p + k + o for i, s, p, k, o in
                 zip((h, w), stride, padding, (kh, kw), output_padding))
    if any(v <= 0 for v in size):
        raise _C.KilnRuntimeError(f"{op}: the output size {list(size)} is too small (input "
                                  f"{list(input.shape)}, kernel {[kh, kw]})")
    c_in_g = c_in // groups
    pixels = x.reshape(n, groups, c_in_g, h * w)
    # [groups, C_out/g * kH * kW, C_in/g] @ [N, groups, C_in/g, H*W]
    wt = weight.reshape(groups, c_in_g, c_out_g * kh * kw).transpose(1, 2)
    cols = (wt @ pixels).reshape(n, groups * c_out_g * kh * kw, h * w)
    y = _C.col2im(cols, size, (kh, kw), stride, padding)
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    return y if batched else y.squeeze(0)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Over (N, C_in, L) (or unbatched) with weight (C_in, C_out / groups, k)."""
    op = "conv_transpose1d"
    s, p = _pair(stride, "stride", op, 1), _pair(padding, "padding", op, 1)
    o = _pair(output_padding, "output_padding", op, 1)
    _check(input, weight, groups, s, p, o, _pair(dilation, "dilation", op, 1), op, 1)
    y = conv_transpose2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias, (1,) + s, (0,) + p,
                         (0,) + o, groups)
    return y.squeeze(-2)


def grouped_conv2d(input, weight, bias, stride, padding, groups):
    """conv2d with groups > 1: input (N, C_in, H, W) (or unbatched), weight
    (C_out, C_in / groups, kH, kW)."""
    op = "conv2d"
    stride, padding = _pair(stride, "stride", op), _pair(padding, "padding", op)
    if input.ndim not in (3, 4):
        raise _C.KilnRuntimeError(f"conv2d: Expected 3D (unbatched) or 4D (batched) input to "
                                  f"conv2d, but got input of size: {list(input.shape)}")
    if weight.ndim != 4:
        raise _C.KilnRuntimeError(f"conv2d: weight should have 4 dimensions, got weight of size "
                                  f"{list(weight.shape)}")
    c_out, c_in_g, kh, kw = weight.shape
    if groups < 1 or c_out % groups:
        raise _C.KilnRuntimeError(f"conv2d: Given groups={groups}, expected weight to be "
                                  f"divisible by {groups} at dimension 0, but got weight of size "
                                  f"{list(weight.shape)} instead")
    channels = input.shape[-3]
    if channels != c_in_g * groups:
        raise _C.KilnRuntimeError(
            f"conv2d: Given groups={groups}, weight of size {list(weight.shape)}, expected "
            f"input{list(input.shape)} to have {c_in_g * groups} channels, but got {channels} "
            "channels instead")
    batched = input.ndim == 4
    x = input if batched else input.unsqueeze(0)
    n, _, h, w = x.shape
    oh = (h + 2 * padding[0] - kh) // stride[0] + 1
    ow = (w + 2 * padding[1] - kw) // stride[1] + 1
    if oh <= 0 or ow <= 0:
        raise _C.KilnRuntimeError(f"conv2d: Calculated output size ({oh}x{ow}) is too small "
                                  f"for input {list(input.shape)} and kernel {[kh, kw]}")
    cols = _C.im2col(x, (kh, kw), stride, padding)  # [N, C_in*kH*kW, L], channel-major
    cols = cols.reshape(n, groups, c_in_g * kh * kw, oh * ow)
    wg = weight.reshape(groups, c_out // groups, c_in_g * kh * kw)
    y = (wg @ cols).reshape(n, c_out, oh, ow)
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    return y if batched else y.squeeze(0)
