"""DistributedDataParallel: torch.nn.parallel.DistributedDataParallel over kiln's
process groups (kiln.distributed; the reducer is C++, ops/distributed/data_parallel.h).

At construction, every rank's parameters and buffers become rank 0's (broadcast). A
forward with grad enabled and require_backward_grad_sync set queues the gradient
all-reduce to run when the next backward() returns: gradients are averaged across
ranks in buckets of at most bucket_cap_mb (reverse parameter order, grouped by dtype and
device), so after backward() every rank holds the same averaged .grad, as with PyTorch.

After backward, not from per-gradient hooks: kiln's autograd has no gradient hooks. The
all-reduce is an op the tracer records (kiln.distributed.all_reduce), so forward,
backward, the bucketed all-reduce and the optimizer step are one trace between two host
reads; with NCCL its calls are captured in the step's CUDA graph. The buckets are
reduced in order after backward, not overlapped with it.

no_sync() (or require_backward_grad_sync = False) skips the all-reduce for gradient
accumulation: the micro-steps under it accumulate local gradients, and the first
backward after it averages the sum.
"""

import contextlib

from ... import _after_backward
from ... import _kiln as _C
from ..modules.module import Module

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, process_group=None, bucket_cap_mb=25,
                 find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, **kwargs):
        super().__init__()
        if not _C._dist_is_initialized():
            raise RuntimeError("DistributedDataParallel: the default process group has not "
                               "been initialized; call kiln.distributed.init_process_group "
                               "first")
        if process_group is not None:
            raise ValueError("DistributedDataParallel: kiln has only the default group "
                             "(process_group=None)")
        if device_ids is not None and len(device_ids) != 1:
            raise ValueError("DistributedDataParallel: device_ids must hold one device (one "
                             f"process per device), got {device_ids!r}")
        self.module = module
        self.device_ids = device_ids
        self.output_device = output_device
        self.broadcast_buffers = broadcast_buffers
        self.require_backward_grad_sync = True
        self.bucket_cap_mb = bucket_cap_mb
        self.find_unused_parameters = find_unused_parameters
        params = [p for p in module.parameters() if p.requires_grad]
        with _no_grad():
            _C._dist_broadcast_tensors(list(module.parameters()) + list(module.buffers()), 0)
        self._reducer = _C._make_gradient_reducer(params, float(bucket_cap_mb))
        self._sync_key = object()

    def forward(self, *inputs, **kwargs):
        if self.broadcast_buffers and _C._dist_world_size() > 1:
            buffers = list(self.module.buffers())
            if buffers:
                with _no_grad():
                    _C._dist_broadcast_tensors(buffers, 0)
        if _C.is_grad_enabled() and self.require_backward_grad_sync:
            _after_backward.queue(self._sync_key, self._reducer.all_reduce_gradients)
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside do not all-reduce (gradient accumulation)."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def _bucket_indices(self):
        """The parameter indices (of module.parameters() that require grad) per bucket."""
        return self._reducer.buckets


def _no_grad():
    from ..._functions import no_grad

    return no_grad()
