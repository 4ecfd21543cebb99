"""Seeding and integer sampling in PyTorch spelling: kiln.manual_seed, seed,
initial_seed, kiln.Generator, kiln.randint, kiln.randperm; and the default floating
dtype (kiln.set_default_dtype / get_default_dtype) with the factories that honour it.

kiln's random numbers come from one Philox stream per thread (kiln.rand / randn, the C++
runtime), reseeded by kiln.manual_seed. A kiln.Generator is a seed holder: passed as
``generator=`` to rand / randn / randint / randperm / the DataLoader's samplers, it
gives its own reproducible stream (numpy's Philox, seeded from it, drawn on the host)
without touching the global one.
"""

import builtins
import numbers
import secrets

from . import _kiln as _C
from . import _functions

__all__ = [
    "Generator", "manual_seed", "seed", "initial_seed", "default_generator", "randint",
    "randperm", "set_default_dtype", "get_default_dtype", "empty", "zeros", "ones", "rand",
    "randn", "full", "arange",
]


class Generator:
    """Generator(device='cpu'): a seed (manual_seed / seed / initial_seed) and the
    stream derived from it, for the ``generator=`` arguments of randint, randperm and
    kiln.utils.data's samplers. get_state / set_state round-trip that stream."""

    def __init__(self, device="cpu"):
        self.device = _C.device(device) if isinstance(device, str) else device
        self._seed = 67280421310721  # PyTorch's default seed
        self._stream = None

    def manual_seed(self, seed):
        if not isinstance(seed, int) or isinstance(seed, builtins.bool):
            raise TypeError(f"manual_seed expected an int seed, got {type(seed).__name__}")
        self._seed = seed & 0xFFFF_FFFF_FFFF_FFFF
        self._stream = None
        return self

    def seed(self):
        self.manual_seed(secrets.randbits(63))
        return self._seed

    def initial_seed(self):
        return self._seed

    def _numpy(self):
        """The numpy Generator this one draws from (created on first use)."""
        if self._stream is None:
            import numpy as np

            self._stream = np.random.Generator(np.random.Philox(self._seed))
        return self._stream

    def get_state(self):
        return (self._seed, self._numpy().bit_generator.state)

    def set_state(self, state):
        self._seed, bits = state
        self._numpy().bit_generator.state = bits
        return self


default_generator = Generator()


def manual_seed(seed):
    """Seeds kiln's random streams (kiln.rand / randn / dropout / init, and the default
    Generator); returns the default Generator, as torch.manual_seed does."""
    if not isinstance(seed, numbers.Real):
        raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    _C.manual_seed(seed & 0xFFFF_FFFF_FFFF_FFFF)
    return default_generator.manual_seed(seed)


def seed():
    """Seeds kiln with a non-deterministic random number and returns it."""
    value = secrets.randbits(63)
    manual_seed(value)
    return value


def initial_seed():
    return default_generator.initial_seed()


def _size_arg(fn, size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    for s in size:
        if not isinstance(s, int) or isinstance(s, builtins.bool) or s < 0:
            raise TypeError(f"{fn}(): size must be a tuple of non-negative ints, got {size!r}")
    return tuple(size)


def randint(low=0, high=None, size=None, *, generator=None, dtype=None, device=None,
            requires_grad=False):
    """Integers drawn uniformly from [low, high): randint(high, size) or
    randint(low, high, size); int64 unless dtype says otherwise."""
    if size is None and isinstance(high, (tuple, list)):
        low, high, size = 0, low, high
    if size is None or high is None:
        raise TypeError("randint() missing required argument 'size' (randint(low=0, high, size))")
    size = _size_arg("randint", (size,) if isinstance(size, int) else tuple(size))
    if high <= low:
        raise _C.KilnRuntimeError(f"randint(): random_ expects 'from' to be less than 'to', "
                                  f"but got from={low} >= to={high}")
    dtype = _C.int64 if dtype is None else dtype
    if generator is not None:
        import numpy as np

        values = generator._numpy().integers(low, high, size=size, dtype=np.int64)
        out = _functions.tensor(values, dtype=dtype, device=device)
    else:
        u = _C.rand(size, dtype=_C.float64, device=device)
        picked = _C.clamp((u * float(high - low)).to(_C.int64), 0, high - low - 1)
        out = (picked + low).to(dtype)
    if requires_grad:
        out.requires_grad_(True)
    return out


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False):
    """A random permutation of 0..n-1 (int64)."""
    if not isinstance(n, int) or n < 0:
        raise _C.KilnRuntimeError(f"randperm(): n must be a non-negative int, got {n!r}")
    import numpy as np

    if generator is not None:
        perm = generator._numpy().permutation(n)
    else:
        keys = _C.rand((n,), dtype=_C.float64).numpy()  # kiln's stream decides the order
        perm = np.argsort(keys, kind="stable")
    return _functions.tensor(perm.astype(np.int64), dtype=_C.int64 if dtype is None else dtype,
                             device=device)


# ---- the default floating dtype

_FLOATING = (_C.float16, _C.bfloat16, _C.float32, _C.float64)


def set_default_dtype(d):
    """The dtype of floating tensors made without a dtype (factories, kiln.tensor of
    Python floats, nn layers): a floating kiln dtype."""
    if d not in _FLOATING:
        raise TypeError(f"set_default_dtype(): only floating-point types are supported as the "
                        f"default type, got {d}")
    _functions._DEFAULT_FLOAT = d


def get_default_dtype():
    return _functions._DEFAULT_FLOAT


def _with_default(name):
    op = getattr(_C, name)

    def factory(*args, dtype=None, generator=None, **kwargs):
        if dtype is None:
            dtype = _functions._DEFAULT_FLOAT
        if generator is not None:
            return _from_generator(name, generator, args, dtype, kwargs)
        return op(*args, dtype=dtype, **kwargs)

    factory.__name__ = name
    factory.__doc__ = f"kiln.{name}; dtype defaults to kiln.get_default_dtype()."
    return factory


def _from_generator(name, generator, args, dtype, kwargs):
    """rand / randn drawn from a kiln.Generator's own stream (on the host)."""
    if name not in ("rand", "randn"):
        raise TypeError(f"{name}() got an unexpected keyword argument 'generator'")
    if not isinstance(generator, Generator):
        raise TypeError(f"{name}(): generator must be a kiln.Generator, got "
                        f"{type(generator).__name__}")
    size = _size_arg(name, args)
    rng = generator._numpy()
    values = rng.random(size) if name == "rand" else rng.standard_normal(size)
    out = _functions.tensor(values, dtype=dtype, device=kwargs.get("device"))
    if kwargs.get("requires_grad"):
        out.requires_grad_(True)
    return out


empty = _with_default("empty")
zeros = _with_default("zeros")
ones = _with_default("ones")
rand = _with_default("rand")
randn = _with_default("randn")


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    if dtype is None and isinstance(fill_value, builtins.float):
        dtype = _functions._DEFAULT_FLOAT
    out = _C.full(size, fill_value, dtype, device)
    return out.requires_grad_(True) if requires_grad else out


def arange(*args, dtype=None, **kwargs):
    if dtype is None and any(isinstance(a, builtins.float) for a in args + tuple(
            v for k, v in kwargs.items() if k in ("start", "end", "step"))):
        dtype = _functions._DEFAULT_FLOAT
    if dtype is None:
        return _C.arange(*args, **kwargs)
    return _C.arange(*args, dtype=dtype, **kwargs)
