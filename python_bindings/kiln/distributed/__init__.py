"""kiln.distributed: torch.distributed's names, so training scripts import unchanged.
kiln has no distributed training yet (issue 16): is_available() and is_initialized()
are False, and every other call raises NotImplementedError naming itself."""

__all__ = [
    "is_available", "is_initialized", "is_nccl_available", "is_gloo_available",
    "is_mpi_available", "is_torchelastic_launched", "init_process_group",
    "destroy_process_group", "get_rank", "get_world_size", "get_backend", "barrier",
    "all_reduce", "all_gather", "broadcast", "reduce", "gather", "scatter", "new_group",
    "ReduceOp", "Backend",
]


def is_available():
    return False


def is_initialized():
    return False


def is_nccl_available():
    return False


def is_gloo_available():
    return False


def is_mpi_available():
    return False


def is_torchelastic_launched():
    return False


def _unsupported(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"kiln.distributed.{name}: distributed training is not "
                                  "supported by kiln yet (kiln.distributed.is_available() "
                                  "is False)")

    fn.__name__ = name
    fn.__qualname__ = name
    return fn


for _name in ("init_process_group", "destroy_process_group", "get_rank", "get_world_size",
              "get_backend", "barrier", "all_reduce", "all_gather", "broadcast", "reduce",
              "gather", "scatter", "new_group", "all_to_all", "reduce_scatter", "send", "recv"):
    globals()[_name] = _unsupported(_name)
del _name


class ReduceOp:
    SUM = "sum"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    AVG = "avg"


class Backend:
    GLOO = "gloo"
    NCCL = "nccl"
    MPI = "mpi"
