"""Module and Parameter: the base of kiln.nn layers, spelled like torch.nn.Module (same
parameter names and shapes, so a torch state_dict loads straight into a kiln module)."""

import collections

from ... import _kiln as _C
from ..._kiln import Tensor
from ._backward_hooks import BackwardHook as _BackwardHook


def _no_grad():
    from ..._functions import no_grad

    return no_grad()


class _RemovableHandle:
    """What register_*_hook returns: remove() takes the hook out again."""

    _next_id = 0

    def __init__(self, hooks, hook, prepend):
        _RemovableHandle._next_id += 1
        self.id = _RemovableHandle._next_id
        self._hooks = hooks
        hooks[self.id] = hook
        if prepend:
            hooks.move_to_end(self.id, last=False)

    def remove(self):
        self._hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


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
    from ..._functions import tensor

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
        object.__setattr__(self, "_forward_pre_hooks", collections.OrderedDict())
        object.__setattr__(self, "_forward_hooks", collections.OrderedDict())
        object.__setattr__(self, "_backward_hooks", collections.OrderedDict())
        object.__setattr__(self, "_backward_pre_hooks", collections.OrderedDict())

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

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # The lookup above without CPython 3.11's failed generic lookup first (formatting
        # and clearing an AttributeError per parameter read): the same answers, in C, for
        # the classes that keep Module's __getattr__ (python_bindings/src/module_getattr.cpp).
        _C._fast_module_getattr(cls, Module.__getattr__)

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
        d = self.__dict__
        pre, post = d.get("_forward_pre_hooks"), d.get("_forward_hooks")
        bw, bw_pre = d.get("_backward_hooks"), d.get("_backward_pre_hooks")
        if not pre and not post and not bw and not bw_pre:
            return self.forward(*args, **kwargs)
        for hook in list(pre.values()):
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        bw_hook = None
        if bw or bw_pre:
            bw_hook = _BackwardHook(self, bw, bw_pre)
            args = bw_hook.setup_input_hook(args)
        output = self.forward(*args, **kwargs)
        for hook in list(post.values()):
            result = hook(self, args, output)
            if result is not None:
                output = result
        if bw_hook is not None:
            output = bw_hook.setup_output_hook(output)
        return output

    # -- hooks
    def register_forward_pre_hook(self, hook, *, prepend=False):
        """hook(module, args) -> None or new args, before forward; returns a handle
        whose remove() unregisters it."""
        return _RemovableHandle(self._forward_pre_hooks, hook, prepend)

    def register_forward_hook(self, hook, *, prepend=False):
        """hook(module, args, output) -> None or a new output, after forward."""
        return _RemovableHandle(self._forward_hooks, hook, prepend)

    def register_full_backward_hook(self, hook, prepend=False):
        """hook(module, grad_input, grad_output) -> None or a new grad_input, once the
        gradients with respect to the module's positional inputs are computed."""
        return _RemovableHandle(self._backward_hooks, hook, prepend)

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """hook(module, grad_output) -> None or a new grad_output, before the module's
        own backward runs."""
        return _RemovableHandle(self._backward_pre_hooks, hook, prepend)

    register_backward_hook = register_full_backward_hook

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
        if type(self).named_parameters is not Module.named_parameters:
            for _, p in self.named_parameters(recurse=recurse):
                yield p
            return
        # named_parameters' values in its order, without its names and nested generators
        # (clip_grad_norm_(model.parameters()) runs every training step).
        seen = set()
        for module in self._preorder() if recurse else (self,):
            for value in module._parameters.values():
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                yield value

    def _preorder(self):
        """named_modules()' modules in its order (depth first, each once), without building
        their names but for a module whose class defines its own named_modules: that one
        is asked for its subtree, as named_modules would."""
        memo = set()
        stack = [("", self)]
        while stack:
            prefix, m = stack.pop()
            if type(m).named_modules is not Module.named_modules:
                for _, sub in m.named_modules(memo, prefix, True):
                    yield sub
                continue
            if m in memo:
                continue
            memo.add(m)
            yield m
            children = [(prefix + "." + name if prefix else name, c)
                        for name, c in m._modules.items() if c is not None]
            children.reverse()
            stack.extend(children)

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

    # -- device / dtype moves (parameters and buffers replaced by converted tensors)
    # (a tensor shared by two modules, like tied weights, stays one tensor)
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
        from ..._tensor import _parse_to

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


_C._fast_module_getattr(Module, Module.__getattr__)


def _factory_kw(device, dtype):
    """Factory keywords for a layer's parameters: dtype defaults to kiln.get_default_dtype()."""
    from ... import _functions

    return {"device": device, "dtype": _functions._DEFAULT_FLOAT if dtype is None else dtype}
