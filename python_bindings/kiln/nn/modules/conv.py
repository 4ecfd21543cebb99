"""Conv1d and Conv2d (PyTorch's parameter names, shapes, init and arguments: padding
as ints or 'valid' / 'same' (odd kernels), padding_mode zeros / reflect / replicate /
circular, groups (depthwise included: im2col and a batched matmul). Conv1d runs as
conv2d on a height-1 image. dilation other than 1 is not supported yet (the conv2d
kernel has none): it raises, naming the layer.
ConvTranspose1d/2d (groups supported) are in conv_transpose.py."""

import math

from .. import _functional_spatial as FS
from .. import functional as F
from .. import init
from ... import _kiln as _C
from .module import Module, Parameter, _factory_kw


def _tuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    _nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        name, nd = type(self).__name__, self._nd
        if not isinstance(groups, int) or groups <= 0:
            raise _C.KilnValueError(f"{name}: groups must be a positive integer")
        if in_channels % groups or out_channels % groups:
            raise _C.KilnValueError(f"{name}: in_channels and out_channels must be divisible "
                                    "by groups")
        if padding_mode not in _PADDING_MODES:
            raise _C.KilnValueError(f"{name}: padding_mode must be one of {_PADDING_MODES}, "
                                    f"but got padding_mode='{padding_mode}'")
        if _tuple(dilation, nd) != (1,) * nd:
            raise _C.KilnValueError(f"[{name}] dilation={dilation}: only dilation=1 is "
                                    "supported")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _tuple(kernel_size, nd)
        self.stride = _tuple(stride, nd)
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise _C.KilnValueError(f"{name}: Invalid padding string '{padding}', should "
                                        "be one of {'valid', 'same'}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise _C.KilnValueError(f"{name}: padding='same' is not supported for strided "
                                        "convolutions")
            self.padding = tuple(FS._same_padding(padding, kk, 1, name)
                                 for kk in self.kernel_size)
            self._padding_str = padding
        else:
            self.padding = _tuple(padding, nd)
            self._padding_str = None
        self.dilation = (1,) * nd
        self.groups = groups
        self.padding_mode = padding_mode
        kw = _factory_kw(device, dtype)
        self.weight = Parameter(
            _C.empty((out_channels, in_channels // groups) + self.kernel_size, **kw))
        if bias:
            self.bias = Parameter(_C.empty((out_channels,), **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_channels // self.groups * math.prod(self.kernel_size)
            bound = 1 / math.sqrt(fan_in) if fan_in else 0
            init.uniform_(self.bias, -bound, bound)

    def _padded(self, input):
        """(input padded by padding_mode, the padding left for the conv itself)."""
        if self.padding_mode == "zeros":
            return input, self.padding
        amounts = []
        for p in reversed(self.padding):
            amounts += [p, p]
        return FS.pad(input, amounts, self.padding_mode), (0,) * self._nd

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self._padding_str is not None:
            s += f", padding={self._padding_str}"
        elif self.padding != (0,) * self._nd:
            s += f", padding={self.padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """Over (N, C, L) or unbatched (C, L); weight (out_channels, in_channels, k)."""

    _nd = 1

    def forward(self, input):
        x, padding = self._padded(input)
        return FS.conv1d(x, self.weight, self.bias, self.stride, padding, 1, self.groups)


class Conv2d(_ConvNd):
    """Over (N, C, H, W); weight (out_channels, in_channels, kh, kw)."""

    _nd = 2

    def forward(self, input):
        x, padding = self._padded(input)
        return F.conv2d(x, self.weight, self.bias, self.stride, padding, 1, self.groups)
