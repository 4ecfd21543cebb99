"""kiln: eager tensors with a PyTorch-like API over the kiln C++ runtime.

    import kiln
    x = kiln.randn(4, 8)
    y = kiln.relu(x @ kiln.ones(8, 2) + 1)
    print(y.shape, y.dtype, y.device)

One runtime: this package is a thin layer over the ``_kiln`` Boost.Python extension,
which calls the same C++ library (and the same op table, ops/ops.def) as the C++ API.
Every op of that table is a function here (``kiln.relu``, ``kiln.add``, ...); the
pointwise ones are generated from the table, so nothing here lists them by hand.
"""

import os as _os

from . import _kiln as _C
from ._kiln import Tensor, device, dtype
from ._kiln import (  # error classes: each also derives from the matching builtin
    KilnError,
    KilnRuntimeError,
    ShapeError,
    KilnValueError,
    DTypeError,
    KilnIndexError,
    DeviceError,
    OutOfMemoryError,
    BackendError,
)

# ---- dtypes (singletons: `t.dtype is kiln.float32` holds)
float32 = _C.float32
float64 = _C.float64
float16 = _C.float16
bfloat16 = _C.bfloat16
int32 = _C.int32
int64 = _C.int64

_ALL_DTYPES = (_C.bool, _C.int32, _C.int64, _C.float16, _C.bfloat16, _C.float32, _C.float64)


def _dtype_by_name(name):
    for d in _ALL_DTYPES:
        if d.name == name:
            return d
    raise TypeError(f"unknown kiln dtype {name!r}")


# ---- every public function of the extension: each op of the C++ op table under its
# table name (kiln.relu, kiln.add, kiln.softmax, ...), plus composites (zeros, stack, ...)
_OP_TABLE = tuple(_C._op_table())
for _name in dir(_C):
    if (not _name.startswith("_") and _name not in globals()
            and not isinstance(getattr(_C, _name), dtype)):
        globals()[_name] = getattr(_C, _name)
del _name

# ---- functions with Python-side argument handling (these override table entries of
# the same name where the PyTorch spelling needs more than the C++ signature)
from ._size import Size  # noqa: E402
from . import _tensor  # noqa: E402,F401  (adds PyTorch spellings to Tensor)
from ._functions import *  # noqa: E402,F401,F403
from ._functions import __all__ as _functions_all  # noqa: E402
from ._tracer import (  # noqa: E402,F401  (the tracer: regions, compile, explain)
    Explanation,
    GraphBreakError,
    compile,
    explain,
    is_tracing,
    region,
    reset,
    set_config,
    set_tracing,
    synchronize_compiles,
)
from ._random import *  # noqa: E402,F401,F403  (seeding, randint, default dtype)
from ._composites import *  # noqa: E402,F401,F403  (isfinite, floor, logsumexp, flip, ...)
from ._along_dim import *  # noqa: E402,F401,F403  (gather, scatter, sort, topk, cumsum, prod)
from ._split_ops import *  # noqa: E402,F401,F403  (tensor_split, fliplr, addbmm, get_rng_state)
from ._einsum import einsum  # noqa: E402,F401
from ._settings import (  # noqa: E402,F401
    are_deterministic_algorithms_enabled,
    get_float32_matmul_precision,
    set_float32_matmul_precision,
    use_deterministic_algorithms,
)
from ._profiler import profile  # noqa: E402,F401  (kiln.profile(): the profiler)
from ._plot import plot_warmup  # noqa: E402,F401
from . import autograd, optim, utils  # noqa: E402,F401
from . import cuda  # noqa: E402
from . import nn  # noqa: E402
from . import amp, backends, cpu, distributed, linalg  # noqa: E402,F401
from .amp import autocast  # noqa: E402,F401
from .serialization import load, save  # noqa: E402,F401
from .amp.autocast_mode import (  # noqa: E402,F401
    get_autocast_dtype,
    is_autocast_cpu_enabled,
    is_autocast_enabled,
)

# ---- aliases that shadow builtins (defined last so the code above sees the builtins)
bool = _C.bool  # noqa: A001
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001


def _missing_ops():
    """Names of op-table rows with no kiln.<name> function (should be empty); the
    collectives are kiln.distributed.<name> (torch.distributed's spelling)."""
    from . import distributed as _dist

    def found(name, family):
        return getattr(_dist, name, None) if family == "collective" else globals().get(name)

    return [n for n, family in _OP_TABLE if not callable(found(n, family))]


__version__ = "0.1.0"
# Graph-break reports name the user's Python file:line, skipping kiln's own frames.
_C._install_site_provider(_os.path.dirname(_os.path.abspath(__file__)) + _os.sep)
del _os

# The main thread's tracer state is a C++ thread_local, destroyed at exit after the
# interpreter: tensors it still holds could own Python objects (numpy arrays wrapped by
# from_numpy, checkpointed callables), which can no longer be released then (found by
# LeakSanitizer, scripts/sanitize.sh). Let go of them while Python still runs.
import atexit as _atexit  # noqa: E402

_atexit.register(_C._reset)
del _atexit
