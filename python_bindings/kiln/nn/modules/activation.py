"""Activations (ReLU, GELU, ...) and MultiheadAttention, as in torch.nn.modules.activation."""

import math

from .. import _functional_act as FA
from .. import functional as F
from .. import init
from ... import _kiln as _C
from .linear import Linear
from .module import Module, Parameter, _factory_kw, _no_grad


class ReLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, self.inplace)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, self.approximate)

    def extra_repr(self):
        return f"approximate='{self.approximate}'"


class SiLU(Module):
    def forward(self, input):
        return F.silu(input)

    def __init__(self, inplace=False):
        super().__init__()


class Tanh(Module):
    def forward(self, input):
        return _C.tanh(input)


class Sigmoid(Module):
    def forward(self, input):
        return _C.sigmoid(input)


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim)


class LogSoftmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.log_softmax(input, self.dim)

class _OutProj(Linear):
    pass


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention's parameters (in_proj_weight [3E, E], in_proj_bias,
    out_proj) and forward for self- or cross-attention; returns (output, weights averaged
    over heads or None)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, batch_first=False,
                 device=None, dtype=None):
        super().__init__()
        if embed_dim % num_heads:
            raise _C.KilnValueError("embed_dim must be divisible by num_heads")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        kw = _factory_kw(device, dtype)
        self.in_proj_weight = Parameter(_C.empty((3 * embed_dim, embed_dim), **kw))
        if bias:
            self.in_proj_bias = Parameter(_C.zeros((3 * embed_dim,), **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = _OutProj(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        init.xavier_uniform_(self.in_proj_weight)
        if bias:
            with _no_grad():
                self.out_proj.bias.zero_()

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        if not self.batch_first:  # (L, N, E) -> (N, L, E)
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        n, lq, e = query.shape
        ls = key.shape[1]
        w = self.in_proj_weight
        b = self.in_proj_bias
        wq, wk, wv = w.chunk(3, 0)
        bq, bk, bv = b.chunk(3, 0) if b is not None else (None, None, None)
        h, d = self.num_heads, self.head_dim
        q = F.linear(query, wq, bq).reshape(n, lq, h, d).transpose(1, 2)
        k = F.linear(key, wk, bk).reshape(n, ls, h, d).transpose(1, 2)
        v = F.linear(value, wv, bv).reshape(n, ls, h, d).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        if is_causal and attn_mask is None:
            rows = _C.arange(lq, device=query.device).unsqueeze(1)
            cols = _C.arange(ls, device=query.device).unsqueeze(0)
            attn_mask = cols > rows
        if attn_mask is not None:
            if attn_mask.dtype == _C.bool:
                scores = _C.where(attn_mask, float("-inf"), scores)
            else:
                scores = scores + attn_mask
        if key_padding_mask is not None:
            pad = key_padding_mask.reshape(n, 1, 1, ls)
            if pad.dtype == _C.bool:
                scores = _C.where(pad, float("-inf"), scores)
            else:
                scores = scores + pad
        attn = _C.softmax(scores, -1)
        attn = F.dropout(attn, self.dropout, self.training)
        out = (attn @ v).transpose(1, 2).reshape(n, lq, e)
        out = self.out_proj(out)
        if not self.batch_first:
            out = out.transpose(0, 1)
        weights = None
        if need_weights:
            weights = attn.mean(1) if average_attn_weights else attn
        return out, weights


# ---- more activations (nn/_functional_act.py has the formulas)

def _simple(name, fn_name, doc):
    """A parameterless activation module calling FA.<fn_name>(input)."""

    def forward(self, input):
        return getattr(FA, fn_name)(input)

    return type(name, (Module,), {"forward": forward, "__doc__": doc})


class _Inplace(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class LeakyReLU(_Inplace):
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__(inplace)
        self.negative_slope = negative_slope

    def forward(self, input):
        return FA.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(_Inplace):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__(inplace)
        self.alpha = alpha

    def forward(self, input):
        return FA.elu(input, self.alpha, self.inplace)


class CELU(ELU):
    def forward(self, input):
        return FA.celu(input, self.alpha, self.inplace)


class SELU(_Inplace):
    def forward(self, input):
        return FA.selu(input, self.inplace)


class Softplus(Module):
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input):
        return FA.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(_Inplace):
    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__(inplace)
        if min_val > max_val:
            raise _C.KilnValueError(f"Hardtanh: min_val ({min_val}) cannot be greater than "
                                    f"max_val ({max_val})")
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, input):
        return FA.hardtanh(input, self.min_val, self.max_val, self.inplace)


class ReLU6(Hardtanh):
    def __init__(self, inplace=False):
        super().__init__(0.0, 6.0, inplace)


class Hardsigmoid(_Inplace):
    def forward(self, input):
        return FA.hardsigmoid(input, self.inplace)


class Hardswish(_Inplace):
    def forward(self, input):
        return FA.hardswish(input, self.inplace)


class Mish(_Inplace):
    def forward(self, input):
        return FA.mish(input, self.inplace)


class Threshold(_Inplace):
    def __init__(self, threshold, value, inplace=False):
        super().__init__(inplace)
        self.threshold = threshold
        self.value = value

    def forward(self, input):
        return FA.threshold(input, self.threshold, self.value, self.inplace)


class Hardshrink(Module):
    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return FA.hardshrink(input, self.lambd)


class Softshrink(Hardshrink):
    def forward(self, input):
        return FA.softshrink(input, self.lambd)


class GLU(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return FA.glu(input, self.dim)


class Softmin(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return FA.softmin(input, self.dim)


class PReLU(Module):
    """max(0, x) + a * min(0, x) with a learned a (weight: num_parameters values, init)."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.init = init
        self.weight = Parameter(_C.full((num_parameters,), float(init),
                                        _factory_kw(device, dtype)["dtype"], device))

    def forward(self, input):
        return FA.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


LogSigmoid = _simple("LogSigmoid", "logsigmoid", "log(sigmoid(x)), stably.")
Softsign = _simple("Softsign", "softsign", "x / (1 + |x|).")
Tanhshrink = _simple("Tanhshrink", "tanhshrink", "x - tanh(x).")
