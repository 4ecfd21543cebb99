"""kiln.compile(fn, skip=True): once a call's trace is verified break-free, later calls
launch the compiled plan without running fn's Python body (TinyJit-like). See
docs/tracer.md ("Skipping the function") for the contract.

How a call goes:

1. With a plan for this call's signature (its arguments that are not tensors, by value;
   its tensors, by position) whose guards hold, the plan is launched on the call's
   tensors and the module state and globals it was bound to; the result is rebuilt in
   the shape fn returned. Guards: the signature; the identity of every global and
   closure value fn's code (and the user code it called) read; each module's state
   (training flag, parameters, buffers, submodules, hooks, other attributes, by
   identity); no input needing autograd while grad mode is on; the trace's own tensor
   guards (dtype, device, shape, strides, aliasing), checked by the launch.
2. Otherwise fn runs as a traced region, watched (sys.setprofile) for what skipping
   would lose: a call of a builtin that is not known pure (print, list.append, ...), or
   user code that writes globals, closure cells, attributes or items. Either makes fn
   never skipped. After the call the region's plan (tracer/region_plan.h) is bound: each
   input of the trace must be a tensor argument, a parameter or buffer of a guarded
   module, or a tensor a guarded global holds; the result must be made of the trace's
   values, its inputs, and constants (None, bool, int, float, str). Two calls in a row
   with the same plan and binding verify it; the third call skips.
"""

import builtins
import dis
import math
import os
import sys

from . import _kiln as _C

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

# Builtins that read their arguments and change nothing a later call could see.
_PURE_BUILTINS = {
    getattr(builtins, name) for name in (
        "abs", "all", "any", "bool", "callable", "dict", "divmod", "enumerate", "float",
        "frozenset", "getattr", "hasattr", "hash", "int", "isinstance", "issubclass",
        "iter", "len", "list", "map", "max", "min", "next", "range", "repr", "reversed",
        "round", "set", "slice", "sorted", "str", "sum", "tuple", "type", "zip", "super",
        "id")
}
_PURE_BUILTINS |= {getattr(math, n) for n in dir(math) if callable(getattr(math, n))}
_PURE_BUILTINS |= {dict.get, dict.items, dict.keys, dict.values, str.format, str.join,
                   tuple.index, tuple.count}

# Opcodes whose effect a skipped call would lose.
_WRITES = {"STORE_GLOBAL", "DELETE_GLOBAL", "STORE_DEREF", "DELETE_DEREF", "STORE_ATTR",
           "DELETE_ATTR", "STORE_SUBSCR", "DELETE_SUBSCR", "YIELD_VALUE", "IMPORT_NAME",
           "IMPORT_STAR"}
_CONSTANTS = (type(None), bool, int, float, str)
_MODULE_DICTS = ("_parameters", "_buffers", "_modules", "_forward_pre_hooks",
                 "_forward_hooks", "_backward_hooks", "_backward_pre_hooks")


def _is_kiln_code(code):
    return code.co_filename.startswith(_PACKAGE_DIR)


def _writes(code, cache={}):  # noqa: B006  (a per-code-object cache)
    found = cache.get(code)
    if found is None:
        found = next((f"{i.opname} at {code.co_filename}:{i.positions.lineno}"
                      for i in dis.get_instructions(code) if i.opname in _WRITES), "")
        cache[code] = found
    return found


def _global_names(code):
    return {i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"}


class _Watch:
    """sys.setprofile while fn runs: the user code it calls, the globals that code reads,
    and the first thing skipping would lose (effect)."""

    def __init__(self, guarded_closure=None):
        self.guarded_closure = guarded_closure  # the code whose closure cells are guarded
        self.effect = ""
        self.globals = {}  # (id(globals dict), name) -> (globals dict, name, value)
        self.codes = set()

    def __enter__(self):
        self._previous = sys.getprofile()
        sys.setprofile(self._event)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self._previous)
        return False

    def _event(self, frame, event, arg):
        code = frame.f_code
        if event == "c_call":
            if not self.effect and arg not in _PURE_BUILTINS and not _is_kiln_code(code):
                self.effect = (f"calls {getattr(arg, '__qualname__', arg)!s} at "
                               f"{code.co_filename}:{frame.f_lineno}")
        elif event == "call" and code not in self.codes and not _is_kiln_code(code):
            self.codes.add(code)
            if not self.effect:
                self.effect = _writes(code)
            if (not self.effect and code is not self.guarded_closure
                    and set(code.co_freevars) - {"__class__"}):
                self.effect = f"{code.co_qualname} reads closure cells"
            for name in _global_names(code):
                g = frame.f_globals
                if name not in g:
                    g = builtins.__dict__
                    if name not in g:
                        continue
                self.globals[(id(g), name)] = (g, name, g[name])


def _signature(value, tensors):
    """A hashable key of value's non-tensor parts; tensors are appended to `tensors`."""
    if isinstance(value, _C.Tensor):
        tensors.append(value)
        return _C.Tensor
    if isinstance(value, _CONSTANTS):
        return (type(value), value)
    if isinstance(value, (tuple, list)):
        return (type(value),) + tuple(_signature(v, tensors) for v in value)
    if isinstance(value, dict):
        return (dict,) + tuple((k, _signature(v, tensors)) for k, v in value.items())
    return ("object", id(value))  # identity: the plan holds the object (no id reuse)


def _modules_in(values):
    from .nn.modules.module import Module

    found = []
    for v in values:
        if isinstance(v, Module):
            found.extend(v.modules())
    return found


def _module_state(modules):
    """Every module's state as a list of objects, compared by identity."""
    state = []
    for m in modules:
        d = m.__dict__
        state.extend(d.values())
        for key in _MODULE_DICTS:
            c = d.get(key)
            if c:
                state.append(len(c))
                state.extend(c.keys())
                state.extend(c.values())
    return state


class _Plan:
    """A verified plan: how to bind the trace's inputs and rebuild fn's result."""

    def __init__(self, region_plan, sources, result, held, globals_read, modules, state):
        self.region_plan = region_plan
        self.sources = sources      # per trace input: ("arg", i) or ("fixed", tensor)
        self.result = result        # fn's result as a template (see _template)
        self.held = held            # objects the signature refers to by identity
        self.globals_read = globals_read
        self.modules = modules
        self.state = state
        self.wanted = []
        _collect_ops(result, self.wanted)

    def key(self):
        return (self.region_plan.trace_id, tuple(
            (s[0], s[1] if s[0] == "arg" else id(s[1])) for s in self.sources), repr(self.result))

    def holds(self):
        """Whether the state the plan was bound to is unchanged (globals and modules)."""
        for g, name, value in self.globals_read:
            if g.get(name, _MISSING) is not value:
                return False
        return _C._module_state_is(self.modules, _MODULE_DICTS, self.state)

    def launch(self, tensors):
        inputs = [tensors[s[1]] if s[0] == "arg" else s[1] for s in self.sources]
        failed, values = self.region_plan.launch(inputs, self.wanted)
        if failed:
            self.failed = f"a guard failed: {failed}"
            return None
        return _build(self.result, dict(zip(self.wanted, values)), inputs)


_MISSING = object()


def _collect_ops(template, out):
    kind = template[0]
    if kind == "op":
        if template[1] not in out:
            out.append(template[1])
    elif kind in ("tuple", "list"):
        for t in template[1]:
            _collect_ops(t, out)
    elif kind == "dict":
        for _, t in template[1]:
            _collect_ops(t, out)


def _template(value, plan, externals):
    """fn's result as ("op", i) / ("input", slot) / ("const", v) / containers of them;
    None when a part cannot be rebuilt without running fn."""
    if isinstance(value, _C.Tensor):
        i = plan.output_of(value)
        if i >= 0:
            return ("op", i)
        for slot, t in enumerate(externals):
            if _C._tensor_impl_key(t) == _C._tensor_impl_key(value):
                return ("input", slot)
        return None
    if isinstance(value, _CONSTANTS):
        return ("const", value)
    if type(value) in (tuple, list):
        parts = [_template(v, plan, externals) for v in value]
        return None if None in parts else (type(value).__name__, parts)
    if type(value) is dict:
        parts = [(k, _template(v, plan, externals)) for k, v in value.items()]
        return None if any(p is None for _, p in parts) else ("dict", parts)
    return None


def _build(template, values, inputs):
    kind, part = template
    if kind == "op":
        return values[part]
    if kind == "input":
        return inputs[part]
    if kind == "const":
        return part
    if kind == "tuple":
        return tuple(_build(t, values, inputs) for t in part)
    if kind == "list":
        return [_build(t, values, inputs) for t in part]
    return {k: _build(t, values, inputs) for k, t in part}


class SkippingFunction:
    """fn in skip mode (kiln.compile(fn, skip=True)). ``skipped_calls`` counts the calls
    that launched the plan without running fn; ``why_not_skipped`` says why the last
    call ran fn ("" when it skipped)."""

    def __init__(self, fn, traced_region, module=None):
        self._fn = fn
        self._region = traced_region
        self._module = module
        self._plans = {}        # signature -> _Plan
        self._candidate = None  # (signature, plan key) of the last call, to verify
        self._never = ""        # why fn is never skipped (an effect seen)
        self.skipped_calls = 0
        self.why_not_skipped = "not called yet"

    def __call__(self, *args, **kwargs):
        if not kwargs and all(type(a) is _C.Tensor for a in args):
            tensors, signature = list(args), len(args)  # the common case, quickly
        else:
            tensors = []
            signature = _signature((args, kwargs), tensors)
        plan = self._plans.get(signature) if not self._never else None
        if plan is not None:
            if plan.holds():
                result = plan.launch(tensors)
                if result is not None:
                    self.skipped_calls += 1
                    self.why_not_skipped = ""
                    return result
                self.why_not_skipped = plan.failed
            else:
                self.why_not_skipped = "a global, closure value or module state changed"
            del self._plans[signature]
        return self._run(signature, tensors, args, kwargs)

    def _run(self, signature, tensors, args, kwargs):
        if self._never:
            with self._region:
                return self._fn(*args, **kwargs)
        _C._keep_region_plans(True)
        try:
            with _Watch(getattr(self._fn, "__code__", None)) as watch:
                with self._region:
                    result = self._fn(*args, **kwargs)
        finally:
            _C._keep_region_plans(False)
        region_plan = _C._take_region_plan()
        if watch.effect:
            self._never = watch.effect
            self.why_not_skipped = f"fn has effects a skipped call would lose: {watch.effect}"
            self._plans.clear()
            return result
        if region_plan is None:
            self._candidate = None
            self.why_not_skipped = ("no compiled trace ran from fn's entry to its exit "
                                    "(warming up, a graph break, or a random op)")
            return result
        plan = self._bind(region_plan, signature, tensors, watch, args, kwargs, result)
        if plan is None:
            self._candidate = None
            return result
        key = (signature, plan.key())
        if self._candidate == key:
            self._plans[signature] = plan
            self.why_not_skipped = "verified: the next call skips"
        else:
            self._candidate = key
            self.why_not_skipped = "bound once: verified by the next call"
        return result

    def _bind(self, region_plan, signature, tensors, watch, args, kwargs, result):
        globals_read = list(watch.globals.values())
        closure = getattr(self._fn, "__closure__", None)
        if closure:
            for cell in closure:
                globals_read.append((_CellView(cell), "value", cell.cell_contents))
        roots = [self._module] if self._module is not None else []
        roots += [v for _, _, v in globals_read]
        roots += list(args) + list(kwargs.values())
        modules = _modules_in(roots)
        fixed = {}
        for m in modules:
            for t in list(m._parameters.values()) + list(m._buffers.values()):
                if t is not None:
                    fixed[_C._tensor_impl_key(t)] = t
        for _, _, v in globals_read:
            if isinstance(v, _C.Tensor):
                fixed[_C._tensor_impl_key(v)] = v
        by_arg = {_C._tensor_impl_key(t): i for i, t in enumerate(tensors)}
        sources = []
        externals = region_plan.externals
        for slot, t in enumerate(externals):
            k = _C._tensor_impl_key(t)
            if k in by_arg:
                sources.append(("arg", by_arg[k]))
            elif k in fixed:
                sources.append(("fixed", fixed[k]))
            else:
                self.why_not_skipped = (f"input {slot} of the trace is neither an argument, a "
                                        "module's parameter or buffer, nor a global tensor")
                return None
        template = _template(result, region_plan, externals)
        if template is None:
            self.why_not_skipped = ("fn's result holds something other than the trace's "
                                    "values, its inputs and constants")
            return None
        held = [v for v in _held_objects((args, kwargs))]
        return _Plan(region_plan, sources, template, held, globals_read, modules,
                     _module_state(modules))


class _CellView:
    """A closure cell read like a globals dict (g.get(name))."""

    def __init__(self, cell):
        self._cell = cell

    def get(self, name, default):
        try:
            return self._cell.cell_contents
        except ValueError:
            return default


def _held_objects(value):
    if isinstance(value, (_C.Tensor,) + _CONSTANTS):
        return []
    if isinstance(value, (tuple, list)):
        return [o for v in value for o in _held_objects(v)]
    if isinstance(value, dict):
        return [o for v in value.values() for o in _held_objects(v)]
    return [value]
