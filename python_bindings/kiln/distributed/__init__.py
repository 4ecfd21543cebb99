"""kiln.distributed: torch.distributed's names over kiln's process groups
(runtime/distributed in C++), so data-parallel scripts run with `import kiln as torch`.

Backends: "nccl" (CUDA tensors; libnccl.so.2 loaded at run time: KILN_NCCL_LIBRARY, else
PyTorch's nvidia/nccl/lib when installed, else the loader's path and the CUDA toolkit's),
"mpi" (CPU tensors; Open MPI's libmpi.so.40 loaded at run time; start the processes with
mpirun), "gloo" (the CPU backend: "mpi" under mpirun, else kiln's "tcp" sockets through
rank 0 at MASTER_ADDR:MASTER_PORT). Start processes with `python -m kiln.distributed.run
--standalone --nproc_per_node N script.py` (torchrun's flags) or mpirun.

Collectives are synchronous on the CPU backends and enqueued on kiln's stream with NCCL;
async_op=True returns an already completed Work. all_reduce is an op the tracer records
(a training step with its gradient all-reduce is one trace; with NCCL the call is
captured in the step's CUDA graph); broadcast, all_gather, reduce_scatter and barrier are
trace boundaries. As in torch, all_reduce is not differentiable: it writes outside
autograd (no grad_fn; allowed on a leaf that requires grad).
"""

import os
import sys

from .. import _kiln as _C
from ._work import Work

__all__ = [
    "is_available", "is_initialized", "is_nccl_available", "is_gloo_available",
    "is_mpi_available", "is_torchelastic_launched", "init_process_group",
    "destroy_process_group", "get_rank", "get_world_size", "get_backend", "barrier",
    "all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce_scatter",
    "reduce_scatter_tensor", "ReduceOp", "Backend", "Work", "GroupMember", "new_group",
]


class ReduceOp:
    """torch.distributed.ReduceOp's members (the values are kiln's codes)."""
    SUM = 0
    AVG = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4


class Backend(str):
    GLOO = "gloo"
    NCCL = "nccl"
    MPI = "mpi"

    def __new__(cls, name):
        return str.__new__(cls, name.lower())


class GroupMember:
    WORLD = None  # the default group (kiln has only that one)


def is_available():
    return True


def is_initialized():
    return _C._dist_is_initialized()


def is_nccl_available():
    _find_nccl()
    return _C._dist_is_backend_available("nccl")


def is_gloo_available():
    return True


def is_mpi_available():
    return _C._dist_is_backend_available("mpi")


def is_torchelastic_launched():
    return os.environ.get("TORCHELASTIC_RUN_ID") is not None


_NCCL_GLOBS = ("/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
               "/usr/lib/python3*/dist-packages", "/usr/lib/python3/dist-packages",
               "~/.local/lib/python3*/site-packages", "/opt/conda/lib/python3*/site-packages")


def _find_nccl():
    """Points KILN_NCCL_LIBRARY at PyTorch's NCCL (nvidia/nccl/lib/libnccl.so.2 of this
    Python's packages, else of another Python's on the machine) when the variable is
    unset and one is installed; otherwise kiln looks on the loader's path and in the CUDA
    toolkit."""
    if os.environ.get("KILN_NCCL_LIBRARY"):
        return
    import glob

    bases = list(sys.path)
    for pattern in _NCCL_GLOBS:
        bases += sorted(glob.glob(os.path.expanduser(pattern)), reverse=True)
    for base in bases:
        path = os.path.join(base or ".", "nvidia", "nccl", "lib", "libnccl.so.2")
        if os.path.isfile(path):
            os.environ["KILN_NCCL_LIBRARY"] = path
            return


def _env_int(name):
    value = os.environ.get(name)
    return None if value in (None, "") else int(value)


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):
    """Joins the default group. backend: "gloo" (default), "mpi", "nccl". init_method:
    "env://" (default: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; under mpirun
    OMPI_COMM_WORLD_RANK/SIZE) or "tcp://host:port". NCCL's device: device_id, else
    LOCAL_RANK, else 0."""
    if store is not None:
        raise ValueError("init_process_group: store= is not supported by kiln; use "
                         "init_method='env://' or 'tcp://host:port'")
    name = str(backend or "gloo").lower()
    if ":" in name:  # "cpu:gloo,cuda:nccl": kiln picks the device backend
        parts = dict(p.split(":", 1) for p in name.split(","))
        name = parts.get("cuda", parts.get("cpu", "gloo"))
    addr, port = "", -1
    if init_method and init_method != "env://":
        if not init_method.startswith("tcp://"):
            raise ValueError(f"init_process_group: init_method={init_method!r} is not "
                             "supported (use 'env://' or 'tcp://host:port')")
        host, _, p = init_method[len("tcp://"):].partition(":")
        addr, port = host, int(p.split("/")[0]) if p else -1
    if rank is None or rank < 0:
        rank = _env_int("RANK")
        rank = _env_int("OMPI_COMM_WORLD_RANK") if rank is None else rank
    if world_size is None or world_size < 0:
        world_size = _env_int("WORLD_SIZE")
        world_size = _env_int("OMPI_COMM_WORLD_SIZE") if world_size is None else world_size
    if name != "mpi" and (rank is None or world_size is None):
        raise ValueError("init_process_group: rank and world_size are unknown: pass them, or "
                         "set RANK and WORLD_SIZE (python -m kiln.distributed.run does)")
    device = -1
    if device_id is not None:
        device = device_id if isinstance(device_id, int) else (device_id.index or 0)
    if name == "nccl":
        _find_nccl()
    seconds = 300.0 if timeout is None else float(getattr(timeout, "total_seconds",
                                                          lambda: timeout)())
    _C._dist_init(name, -1 if rank is None else int(rank),
                  -1 if world_size is None else int(world_size), addr, port, device, seconds)


def destroy_process_group(group=None):
    _C._dist_destroy()


def _check_group(group, op):
    if group is not None and group is not GroupMember.WORLD:
        raise ValueError(f"{op}: kiln has only the default group (group=None)")


def get_rank(group=None):
    _check_group(group, "get_rank")
    return _C._dist_rank()


def get_world_size(group=None):
    _check_group(group, "get_world_size")
    return _C._dist_world_size()


def get_backend(group=None):
    _check_group(group, "get_backend")
    return _C._dist_backend()


def new_group(ranks=None, timeout=None, backend=None, pg_options=None):
    if ranks is not None and sorted(ranks) != list(range(get_world_size())):
        raise ValueError("new_group: kiln has only the default group (all ranks)")
    return GroupMember.WORLD


def _done(async_op):
    return Work() if async_op else None


def _op_code(op):
    if isinstance(op, int) and 0 <= op <= 4:
        return op
    raise ValueError(f"unknown ReduceOp {op!r} (use kiln.distributed.ReduceOp.SUM, ...)")


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    _check_group(group, "all_reduce")
    _C._dist_all_reduce(tensor, _op_code(op))
    return _done(async_op)


def broadcast(tensor, src, group=None, async_op=False):
    _check_group(group, "broadcast")
    _C._dist_broadcast(tensor, int(src))
    return _done(async_op)


def barrier(group=None, async_op=False, device_ids=None):
    _check_group(group, "barrier")
    _C._dist_barrier()
    return _done(async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """output_tensor: world_size times input's elements (stacked or concatenated on dim 0)."""
    _check_group(group, "all_gather_into_tensor")
    _C._dist_all_gather(output_tensor, input_tensor)
    return _done(async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[r] gets rank r's tensor (each entry shaped like tensor)."""
    _check_group(group, "all_gather")
    n = get_world_size()
    if len(tensor_list) != n:
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} entries, expected "
                         f"world_size={n}")
    for t in tensor_list:
        if tuple(t.shape) != tuple(tensor.shape) or t.dtype != tensor.dtype:
            raise ValueError(f"all_gather: every tensor_list entry must match tensor "
                             f"({tuple(tensor.shape)}, {tensor.dtype}), got {tuple(t.shape)}, "
                             f"{t.dtype}")
    from .. import empty

    flat = empty((n,) + tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device)
    _C._dist_all_gather(flat, tensor.contiguous())
    for r, t in enumerate(tensor_list):
        t.copy_(flat[r])
    return _done(async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """output gets block `rank` of the reduction of input (world_size times output's size)."""
    _check_group(group, "reduce_scatter_tensor")
    _C._dist_reduce_scatter(output, input, _op_code(op))
    return _done(async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """output gets the reduction over ranks of input_list[rank]."""
    _check_group(group, "reduce_scatter")
    n = get_world_size()
    if len(input_list) != n:
        raise ValueError(f"reduce_scatter: input_list has {len(input_list)} entries, expected "
                         f"world_size={n}")
    for t in input_list:
        if tuple(t.shape) != tuple(output.shape) or t.dtype != output.dtype:
            raise ValueError(f"reduce_scatter: every input_list entry must match output "
                             f"({tuple(output.shape)}, {output.dtype}), got {tuple(t.shape)}, "
                             f"{t.dtype}")
    from .. import stack

    _C._dist_reduce_scatter(output, stack(list(input_list)).contiguous(), _op_code(op))
    return _done(async_op)
