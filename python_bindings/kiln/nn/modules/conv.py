"""Conv2d (PyTorch's parameter names, shapes and init)."""

import math

from .. import functional as F
from .. import init
from ... import _kiln as _C
from .module import Module, Parameter, _factory_kw


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


class Conv2d(Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        if dilation not in (1, (1, 1)) or groups != 1 or padding_mode != "zeros":
            raise _C.KilnValueError("[Conv2d] only dilation=1, groups=1, padding_mode='zeros' "
                                    "are supported")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _pair(kernel_size)
        self.stride = _pair(stride)
        self.padding = _pair(padding)
        kw = _factory_kw(device, dtype)
        self.weight = Parameter(_C.empty((out_channels, in_channels) + self.kernel_size, **kw))
        if bias:
            self.bias = Parameter(_C.empty((out_channels,), **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
            bound = 1 / math.sqrt(fan_in) if fan_in else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        return s + ("" if self.bias is not None else ", bias=False")
