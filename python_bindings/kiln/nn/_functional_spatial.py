"""Spatial functions of kiln.nn.functional composed of kiln ops: conv1d (conv2d on a
height-1 image), pad (constant / reflect / replicate / circular, through cat and
index_select), interpolate (nearest, bilinear, linear: index_select and weighted sums,
PyTorch's source-coordinate rules), pixel_shuffle / pixel_unshuffle (views),
adaptive_avg_pool1d/2d (averaging matrices of PyTorch's bins, applied by matmul) and
channel dropout (dropout1d / dropout2d)."""

import math

from .. import _kiln as _C

__all__ = ["conv1d", "pad", "interpolate", "upsample", "pixel_shuffle", "pixel_unshuffle",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d", "dropout1d", "dropout2d"]


def _single(v, name, op):
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise _C.KilnValueError(f"{op}: {name} must be an int or a 1-tuple, got {v}")
        return v[0]
    return v


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Over (N, C, L) (or unbatched (C, L)) with weight (O, C, K)."""
    from .functional import conv2d

    if input.ndim not in (2, 3):
        raise _C.KilnRuntimeError(f"conv1d: Expected 2D (unbatched) or 3D (batched) input, but "
                                  f"got input of size: {list(input.shape)}")
    batched = input.ndim == 3
    x = input if batched else input.unsqueeze(0)
    stride = _single(stride, "stride", "conv1d")
    if isinstance(padding, str):
        padding = _same_padding(padding, weight.shape[-1], stride, "conv1d")
    padding = _single(padding, "padding", "conv1d")
    y = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, stride), (0, padding),
               _single(dilation, "dilation", "conv1d"), groups).squeeze(2)
    return y if batched else y.squeeze(0)


def _same_padding(mode, kernel, stride, op):
    if mode == "valid":
        return 0
    if mode == "same":
        if stride != 1:
            raise _C.KilnValueError(f"{op}: padding='same' is not supported for strided "
                                    "convolutions")
        if kernel % 2 == 0:
            raise _C.KilnValueError(f"{op}: padding='same' with an even kernel size ({kernel}) "
                                    "is not supported by kiln (it pads asymmetrically)")
        return kernel // 2
    raise _C.KilnValueError(f"{op}: Invalid padding string '{mode}', should be one of "
                            "{'valid', 'same'}")


def _index(indices, device):
    from .._functions import tensor

    return tensor(list(indices), dtype=_C.int64, device=device)


def _pad_dim(x, dim, before, after, mode, value):
    n = x.shape[dim]
    if before < 0 or after < 0:  # negative padding crops
        x = x.narrow(dim, -min(before, 0), n + min(before, 0) + min(after, 0))
        return _pad_dim(x, dim, max(before, 0), max(after, 0), mode, value)
    if before == 0 and after == 0:
        return x
    if mode == "constant":
        parts = []
        for size in (before, after):
            shape = list(x.shape)
            shape[dim] = size
            parts.append(_C.full(tuple(shape), value, x.dtype, x.device))
        return _C.cat([parts[0], x, parts[1]], dim)
    if mode == "reflect":
        if before >= n or after >= n:
            raise _C.KilnRuntimeError(f"pad: Padding size should be less than the corresponding "
                                      f"input dimension, but got: padding ({before}, {after}) at "
                                      f"dimension {dim} of input {list(x.shape)}")
        idx = [before - i for i in range(before)] + list(range(n)) + \
              [n - 2 - i for i in range(after)]
    elif mode == "replicate":
        idx = [0] * before + list(range(n)) + [n - 1] * after
    elif mode == "circular":
        if before > n or after > n:
            raise _C.KilnRuntimeError("pad: Padding value causes wrapping around more than once.")
        idx = [(i - before) % n for i in range(n + before + after)]
    else:
        raise NotImplementedError(f"pad: mode '{mode}' is not implemented (constant, reflect, "
                                  "replicate or circular)")
    return _C.index_select(x, dim, _index(idx, x.device))


def pad(input, pad, mode="constant", value=None):
    """pad = (last_before, last_after, second_last_before, ...), as PyTorch's."""
    if len(pad) % 2:
        raise _C.KilnRuntimeError("pad: Padding length must be divisible by 2")
    if len(pad) // 2 > input.ndim:
        raise _C.KilnValueError("pad: Padding length too large")
    if mode != "constant" and value not in (None, 0):
        raise _C.KilnValueError(f"pad: Padding mode \"{mode}\" doesn't take in value argument")
    x = input
    for i in range(len(pad) // 2):
        dim = input.ndim - 1 - i
        x = _pad_dim(x, dim, int(pad[2 * i]), int(pad[2 * i + 1]), mode,
                     0.0 if value is None else value)
    return x


def _out_sizes(input, size, scale_factor, nd, op):
    spatial = tuple(input.shape[2:])
    if (size is None) == (scale_factor is None):
        raise _C.KilnValueError(f"{op}: either size or scale_factor should be defined (only one)")
    if size is not None:
        sizes = tuple(size) if isinstance(size, (tuple, list)) else (size,) * nd
        if len(sizes) != nd:
            raise _C.KilnValueError(f"{op}: Input and output must have the same number of "
                                    f"spatial dimensions, but got input with spatial dimensions "
                                    f"of {list(spatial)} and output size of {list(sizes)}.")
        return sizes, [i / o for i, o in zip(spatial, sizes)]
    factors = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) \
        else (scale_factor,) * nd
    sizes = tuple(int(math.floor(i * f)) for i, f in zip(spatial, factors))
    return sizes, [1.0 / f for f in factors]


def _nearest(x, dim, out, scale):
    n = x.shape[dim]
    idx = [min(int(math.floor(i * scale)), n - 1) for i in range(out)]
    return _C.index_select(x, dim, _index(idx, x.device))


def _linear(x, dim, out, scale, align_corners):
    n = x.shape[dim]
    lo, hi, w = [], [], []
    for i in range(out):
        if align_corners:
            src = i * (n - 1) / (out - 1) if out > 1 else 0.0
        else:
            src = max((i + 0.5) * scale - 0.5, 0.0)
        i0 = min(int(math.floor(src)), n - 1)
        lo.append(i0)
        hi.append(min(i0 + 1, n - 1))
        w.append(src - i0)
    from .._functions import tensor

    shape = [1] * x.ndim
    shape[dim] = out
    lam = tensor(w, dtype=x.dtype, device=x.device).reshape(shape)
    a = _C.index_select(x, dim, _index(lo, x.device))
    b = _C.index_select(x, dim, _index(hi, x.device))
    return a + (b - a) * lam


_MODES = {"nearest": 0, "linear": 1, "bilinear": 2}


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resizes (N, C, L) or (N, C, H, W) input: 'nearest', 'linear' (3-D), 'bilinear'
    (4-D), with PyTorch's coordinate rules (align_corners False: half-pixel centres)."""
    if mode not in _MODES:
        raise NotImplementedError(f"interpolate: mode '{mode}' is not supported by kiln "
                                  "(nearest, linear, bilinear)")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported by kiln")
    nd = input.ndim - 2
    if mode != "nearest" and nd != _MODES[mode]:
        raise NotImplementedError(f"interpolate: got {input.ndim}D input, but {mode} mode "
                                  f"needs {_MODES[mode] + 2}D input")
    if mode == "nearest" and align_corners is not None:
        raise _C.KilnValueError("interpolate: align_corners option can only be set with the "
                                "interpolating modes: linear | bilinear | bicubic | trilinear")
    if nd < 1:
        raise _C.KilnValueError(f"interpolate: expected 3D or 4D input, got {input.ndim}D")
    sizes, scales = _out_sizes(input, size, scale_factor, nd, "interpolate")
    if recompute_scale_factor:
        scales = [i / o for i, o in zip(tuple(input.shape[2:]), sizes)]
    x = input
    for k, (out, scale) in enumerate(zip(sizes, scales)):
        dim = 2 + k
        if mode == "nearest":
            x = _nearest(x, dim, out, scale)
        else:
            x = _linear(x, dim, out, scale, bool(align_corners))
    return x


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return interpolate(input, size, scale_factor, mode, align_corners)


def pixel_shuffle(input, upscale_factor):
    """(*, C r^2, H, W) -> (*, C, H r, W r)."""
    r = upscale_factor
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise _C.KilnRuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                                  f"divisible by the square of upscale_factor, but input.size(-3)"
                                  f"={c} is not divisible by {r * r}")
    n = len(lead)
    x = input.reshape(tuple(lead) + (c // (r * r), r, r, h, w))
    order = list(range(n)) + [n, n + 3, n + 1, n + 4, n + 2]
    return x.permute(order).reshape(tuple(lead) + (c // (r * r), h * r, w * r))


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H r, W r) -> (*, C r^2, H, W)."""
    r = downscale_factor
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise _C.KilnRuntimeError(f"pixel_unshuffle expects height and width to be divisible by "
                                  f"downscale_factor, but got {h} x {w} and {r}")
    n = len(lead)
    x = input.reshape(tuple(lead) + (c, h // r, r, w // r, r))
    order = list(range(n)) + [n, n + 2, n + 4, n + 1, n + 3]
    return x.permute(order).reshape(tuple(lead) + (c * r * r, h // r, w // r))


def _bins_matrix(n_in, n_out, dtype, device):
    """(n_out, n_in): row i averages PyTorch's adaptive bin [floor(i n/o), ceil((i+1) n/o))."""
    from .._functions import tensor

    rows = []
    for i in range(n_out):
        a = (i * n_in) // n_out
        b = -(-((i + 1) * n_in) // n_out)
        rows.append([1.0 / (b - a) if a <= j < b else 0.0 for j in range(n_in)])
    return tensor(rows, dtype=dtype, device=device)


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def adaptive_avg_pool2d(input, output_size):
    if input.ndim not in (3, 4):
        raise _C.KilnValueError(f"adaptive_avg_pool2d: Expected 3D or 4D tensor, but got "
                                f"{input.ndim}D")
    h, w = input.shape[-2], input.shape[-1]
    oh, ow = _pair(output_size)
    oh, ow = h if oh is None else oh, w if ow is None else ow
    mh = _bins_matrix(h, oh, input.dtype, input.device)
    mw = _bins_matrix(w, ow, input.dtype, input.device)
    return mh @ input @ mw.t()


def adaptive_avg_pool1d(input, output_size):
    if input.ndim not in (2, 3):
        raise _C.KilnValueError(f"adaptive_avg_pool1d: Expected 2D or 3D tensor, but got "
                                f"{input.ndim}D")
    out = _single(output_size, "output_size", "adaptive_avg_pool1d")
    return input @ _bins_matrix(input.shape[-1], out, input.dtype, input.device).t()


def _channel_dropout(input, p, training, inplace, spatial, op):
    if p < 0.0 or p > 1.0:
        raise _C.KilnValueError(f"{op}: dropout probability has to be between 0 and 1, but got "
                                f"{p}")
    if input.ndim not in (spatial + 1, spatial + 2):
        raise _C.KilnRuntimeError(f"{op}: Expected {spatial + 1}D or {spatial + 2}D input, but "
                                  f"received a {input.ndim}D input")
    if not training or p == 0.0:
        return input
    batched = input.ndim == spatial + 2
    lead = tuple(input.shape[:2]) if batched else tuple(input.shape[:1])
    mask_shape = lead + (1,) * spatial
    if p == 1.0:
        out = input * 0
    else:
        keep = _C.rand(mask_shape, dtype=input.dtype if input.dtype.is_floating_point
                       else _C.float32, device=input.device) >= p
        out = _C.where(keep, input * (1.0 / (1.0 - p)), 0.0)
    return input.copy_(out) if inplace else out


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, L) / (C, L) input with probability p."""
    return _channel_dropout(input, p, training, inplace, 1, "dropout1d")


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, H, W) input with probability p. 3-D input is
    taken as (N, C, L), with PyTorch's warning (its channel-wise 1-D behaviour)."""
    if input.ndim == 3:
        import warnings

        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that "
                      "channel-wise 1D dropout behavior is desired - input is interpreted as "
                      "shape (N, C, L), where C is the channel dim. This behavior will change "
                      "in a future release to interpret the input as one without a batch "
                      "dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise "
                      "dropout behavior, please switch to using dropout1d instead.",
                      stacklevel=2)
        return _channel_dropout(input, p, training, inplace, 1, "dropout2d")
    return _channel_dropout(input, p, training, inplace, 2, "dropout2d")
