"""kiln.nn modules, spelled and initialized like PyTorch's (same parameter names and
shapes, so a torch state_dict loads straight into the kiln module)."""

import collections
import math

from .. import _kiln as _C
from .._kiln import Tensor
from . import functional as F
from . import init

__all__ = [
    "Parameter", "Module", "Sequential", "ModuleList", "ModuleDict", "Identity",
    "Linear", "LayerNorm", "Embedding", "Conv2d", "MaxPool2d", "AvgPool2d", "Dropout",
    "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "Flatten",
    "MultiheadAttention", "CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss",
]



def _no_grad():
    from .._functions import no_grad

    return no_grad()


# ---- Parameter: a tensor marked as a module parameter

class _ParameterMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and getattr(obj, "_kiln_is_param", False)


class Parameter(metaclass=_ParameterMeta):
    """Parameter(tensor) -> a kiln.Tensor (sharing tensor's storage) that Modules
    register as a parameter when it is assigned to an attribute."""

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = _C.empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter expects a kiln.Tensor, got {type(data).__name__}")
        p = data.detach()
        p._kiln_is_param = True
        if requires_grad and p.dtype.is_floating_point:
            p.requires_grad_(True)
        return p


def _as_parameter(t):
    if isinstance(t, Parameter):
        return t
    return Parameter(t)


_IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _to_kiln(value, like):
    """A state_dict value (kiln tensor, numpy array, torch tensor, list) as a kiln tensor."""
    if isinstance(value, Tensor):
        return value
    if type(value).__module__.startswith("torch"):
        value = value.detach().cpu().numpy()
    from .._functions import tensor

    return tensor(value, dtype=like.dtype)


class Module:
    """Base class of kiln's layers; subclass it and define forward(), like torch.nn.Module."""

    training: bool

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", collections.OrderedDict())

    # -- attribute routing (parameters, buffers, submodules)
    def __setattr__(self, name, value):
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError("cannot assign before Module.__init__() call")
        params, buffers, modules = d["_parameters"], d["_buffers"], d["_modules"]
        if isinstance(value, (Parameter, Module)):
            for where in (d, params, buffers, modules):
                where.pop(name, None)
            (params if isinstance(value, Tensor) else modules)[name] = value
        elif name in params:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(kiln.Tensor or None expected)")
            params[name] = None if value is None else _as_parameter(value)
        elif name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (kiln.nn.Module or None expected)")
            modules[name] = None
        elif name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(kiln.Tensor or None expected)")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            if key in d and name in d[key]:
                return d[key][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for d in (self._parameters, self._buffers, self._modules):
            if name in d:
                del d[name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        self.__dict__.pop(name, None)
        if param is None:
            self._parameters[name] = None
        else:
            self._parameters[name] = _as_parameter(param)

    def register_buffer(self, name, tensor, persistent=True):
        self.__dict__.pop(name, None)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._modules[name] = module

    register_module = add_module

    # -- calling
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"Module [{type(self).__name__}] is missing forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # -- traversal
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if self in memo and remove_duplicate:
            return
        memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and m not in seen:
                seen.add(m)
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, get, prefix, recurse):
        seen = set()
        modules = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mod_prefix, module in modules:
            for name, value in get(module):
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                yield mod_prefix + ("." if mod_prefix else "") + name, value

    def named_parameters(self, prefix="", recurse=True):
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True):
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # -- modes
    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise TypeError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.zero_()

    # -- state
    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """An OrderedDict name -> tensor of parameters and persistent buffers (the
        module's own tensors, not copies)."""
        out = collections.OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = b
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(out, prefix + name + ".")
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Copies values (kiln tensors, numpy arrays, torch tensors) into the module's
        tensors in place (dtype converted, device kept). strict: the keys must match."""
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing))
            if unexpected:
                parts.append("Unexpected key(s) in state_dict: "
                             + ", ".join(f'"{k}"' for k in unexpected))
            raise _C.KilnRuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:"
                                      "\n\t" + ".\n\t".join(parts) + ".")
        for key, target in own.items():
            if key not in state_dict:
                continue
            value = _to_kiln(state_dict[key], target)
            if tuple(value.shape) != tuple(target.shape):
                raise _C.ShapeError(
                    f"Error(s) in loading state_dict for {type(self).__name__}: size mismatch "
                    f"for {key}: copying a param with shape {list(value.shape)} from "
                    f"checkpoint, the shape in current model is {list(target.shape)}.")
            with _no_grad():
                target.copy_(value)
        return _IncompatibleKeys(missing, unexpected)

    # -- device / dtype moves (parameters and buffers replaced by converted tensors; a
    # tensor shared by two modules, like tied weights, stays one tensor)
    def _apply_tensors(self, fn):
        done = {}

        def convert(t, make):
            if id(t) not in done:
                done[id(t)] = (t, make(fn(t)))  # t kept alive so its id stays unique
            return done[id(t)][1]

        for m in self.modules():
            for name, p in m._parameters.items():
                if p is not None:
                    m._parameters[name] = convert(p, _as_parameter)
            for name, b in m._buffers.items():
                if b is not None:
                    m._buffers[name] = convert(b, lambda t: t)
        return self

    def to(self, *args, **kwargs):
        """to(device), to(dtype), to(device, dtype): floating tensors change dtype."""
        from .._tensor import _parse_to

        dtype, device, _ = _parse_to(args, dict(kwargs), None)

        def convert(t):
            r = t.to(device) if device is not None else t
            if dtype is not None and r.dtype.is_floating_point:
                r = r.to(dtype)
            return r

        return self._apply_tensors(convert)

    def cuda(self, device=None):
        return self.to("cuda" if device is None else _C.device(device) if not isinstance(
            device, int) else _C.device(f"cuda:{device}"))

    def cpu(self):
        return self.to("cpu")

    def float(self):
        return self.to(_C.float32)

    def double(self):
        return self.to(_C.float64)

    def half(self):
        return self.to(_C.float16)

    def bfloat16(self):
        return self.to(_C.bfloat16)

    # -- printing
    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {sub}")
        main = type(self).__name__ + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))


# ---- containers

class Sequential(Module):
    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], collections.OrderedDict):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return Sequential(collections.OrderedDict(
                list(self._modules.items())[idx]))
        return mods[idx]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input


class ModuleList(Module):
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(mods[idx])
        return mods[idx]

    def __setitem__(self, idx, module):
        key = list(self._modules.keys())[idx]
        self._modules[key] = module

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self


class ModuleDict(Module):
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            items = modules.items() if hasattr(modules, "items") else modules
            for k, m in items:
                self.add_module(k, m)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __contains__(self, key):
        return key in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


# ---- layers

def _factory_kw(device, dtype):
    return {"device": device, "dtype": _C.float32 if dtype is None else dtype}


class Linear(Module):
    """y = x @ weight.T + bias; weight [out_features, in_features], both initialized
    U(-1/sqrt(in_features), 1/sqrt(in_features)) like PyTorch."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        kw = _factory_kw(device, dtype)
        self.weight = Parameter(_C.empty((out_features, in_features), **kw))
        if bias:
            self.bias = Parameter(_C.empty((out_features,), **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        kw = _factory_kw(device, dtype)
        if elementwise_affine:
            self.weight = Parameter(_C.ones(self.normalized_shape, **kw))
            if bias:
                self.bias = Parameter(_C.zeros(self.normalized_shape, **kw))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, device=None, dtype=None,
                 _weight=None):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.padding_idx = padding_idx
        if _weight is not None:
            self.weight = Parameter(_weight)
        else:
            self.weight = Parameter(_C.empty((num_embeddings, embedding_dim),
                                             **_factory_kw(device, dtype)))
            init.normal_(self.weight)
            if padding_idx is not None:
                self.weight[padding_idx] = 0

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


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


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if p < 0 or p > 1:
            raise _C.KilnValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


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


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)


class CrossEntropyLoss(Module):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__()
        self.weight = weight
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction,
                               self.label_smoothing)


class BCEWithLogitsLoss(Module):
    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__()
        self.weight = weight
        self.reduction = reduction
        self.pos_weight = pos_weight

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight, self.reduction,
                                                  self.pos_weight)


class MSELoss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return F.mse_loss(input, target, self.reduction)


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
