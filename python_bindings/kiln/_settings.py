"""Process-wide switches in PyTorch's spelling that kiln records but that change no
numerics: kiln's float32 matmuls are always full float32 ('highest'), its kernels
deterministic."""

from . import _kiln as _C

_state = {"matmul_precision": "highest", "deterministic": False}


def set_float32_matmul_precision(precision):
    if precision not in ("highest", "high", "medium"):
        raise _C.KilnRuntimeError(f"set_float32_matmul_precision: precision must be 'highest', "
                                  f"'high' or 'medium', got {precision!r}")
    _state["matmul_precision"] = precision


def get_float32_matmul_precision():
    return _state["matmul_precision"]


def use_deterministic_algorithms(mode, *, warn_only=False):
    _state["deterministic"] = bool(mode)


def are_deterministic_algorithms_enabled():
    return _state["deterministic"]
