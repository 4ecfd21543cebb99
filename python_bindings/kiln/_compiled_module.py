"""OptimizedModule: what kiln.compile(module) returns, shaped like PyTorch's (the module
at _orig_mod, attributes forwarded to it, state_dict keys prefixed '_orig_mod.'), so
scripts that compile by default and checkpoint the result run unchanged."""

from .nn.modules.module import Module


class OptimizedModule(Module):
    """Calls run the wrapped module inside a traced region (kiln.region); with skip=True
    through kiln._skip.SkippingFunction (the module's state is guarded: parameters,
    buffers, submodules, hooks, training flag)."""

    def __init__(self, mod, traced_region, skip=False):
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_region", traced_region)
        object.__setattr__(self, "training", mod.training)
        skipping = None
        if skip:
            from ._skip import SkippingFunction

            skipping = SkippingFunction(mod, traced_region, module=mod)
        object.__setattr__(self, "_skipping", skipping)

    def forward(self, *args, **kwargs):
        if self._skipping is not None:
            return self._skipping(*args, **kwargs)
        with self._region:
            return self._orig_mod(*args, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_modules"]["_orig_mod"], name)

    def __repr__(self):
        return f"OptimizedModule({self._orig_mod!r})"
