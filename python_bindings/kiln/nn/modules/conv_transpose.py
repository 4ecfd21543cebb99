"""ConvTranspose1d and ConvTranspose2d: PyTorch's parameter names and shapes (weight
(in_channels, out_channels / groups, *kernel_size)), init, output_padding, groups and
forward(input, output_size=None). dilation other than 1 and padding modes other than
zeros raise, naming the layer."""

import math

from .. import _functional_conv as FC
from .. import init
from ... import _kiln as _C
from .module import Module, Parameter, _factory_kw


def _tuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class _ConvTransposeNd(Module):
    _nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__()
        name, nd = type(self).__name__, self._nd
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise _C.KilnValueError(f"{name}: in_channels and out_channels must be divisible "
                                    "by groups")
        if padding_mode != "zeros":
            raise _C.KilnValueError(f'Only "zeros" padding mode is supported for {name}')
        if _tuple(dilation, nd) != (1,) * nd:
            raise _C.KilnValueError(f"[{name}] dilation={dilation}: only dilation=1 is "
                                    "supported")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _tuple(kernel_size, nd)
        self.stride = _tuple(stride, nd)
        self.padding = _tuple(padding, nd)
        self.output_padding = _tuple(output_padding, nd)
        self.dilation = (1,) * nd
        self.groups = groups
        self.padding_mode = padding_mode
        self.transposed = True
        kw = _factory_kw(device, dtype)
        self.weight = Parameter(
            _C.empty((in_channels, out_channels // groups) + self.kernel_size, **kw))
        if bias:
            self.bias = Parameter(_C.empty((out_channels,), **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            bound = 1 / math.sqrt(fan_in) if fan_in else 0
            init.uniform_(self.bias, -bound, bound)

    def _output_padding(self, input, output_size):
        """PyTorch's rule: the output_padding that makes the output output_size."""
        if output_size is None:
            return self.output_padding
        nd = self._nd
        output_size = list(output_size)[-nd:]
        if len(output_size) != nd:
            raise _C.KilnValueError(f"{type(self).__name__}: output_size must have {nd} or "
                                    f"{nd + 2} elements (got {len(output_size)})")
        result = []
        for d in range(nd):
            smallest = ((input.shape[d - nd] - 1) * self.stride[d] - 2 * self.padding[d]
                        + self.kernel_size[d])
            largest = smallest + self.stride[d] - 1
            if not smallest <= output_size[d] <= largest:
                raise _C.KilnValueError(
                    f"requested an output size of {output_size}, but valid sizes range from "
                    f"{smallest} to {largest} (for an input of {list(input.shape)[-nd:]})")
            result.append(output_size[d] - smallest)
        return tuple(result)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding}"
        if self.output_padding != (0,) * self._nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class ConvTranspose1d(_ConvTransposeNd):
    """Over (N, C, L) or unbatched (C, L); weight (in_channels, out_channels / groups, k)."""

    _nd = 1

    def forward(self, input, output_size=None):
        return FC.conv_transpose1d(input, self.weight, self.bias, self.stride, self.padding,
                                   self._output_padding(input, output_size), self.groups)


class ConvTranspose2d(_ConvTransposeNd):
    """Over (N, C, H, W) or unbatched; weight (in_channels, out_channels / groups, kh, kw)."""

    _nd = 2

    def forward(self, input, output_size=None):
        return FC.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                   self._output_padding(input, output_size), self.groups)
