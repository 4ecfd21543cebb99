"""kiln.nn.parallel: DistributedDataParallel (one process per device, over
kiln.distributed) and DataParallel. DataParallel over one device (or none: the CPU)
is what PyTorch's is there, a wrapper that calls the module (kept at .module, so
state_dict keys get PyTorch's "module." prefix); over several devices it raises
NotImplementedError (single-process multi-device training: use
DistributedDataParallel, one process per device)."""

from ..modules.module import Module
from .distributed import DistributedDataParallel

__all__ = ["DataParallel", "DistributedDataParallel"]


class DataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        from ... import cuda

        ids = list(range(cuda.device_count())) if device_ids is None else list(device_ids)
        if len(ids) > 1:
            raise NotImplementedError(f"kiln.nn.parallel.DataParallel over {len(ids)} devices "
                                      f"(device_ids={ids}): multi-device training is not "
                                      "supported by kiln; use DistributedDataParallel "
                                      "(one process per device)")
        self.module = module
        self.device_ids = ids
        self.output_device = output_device
        self.dim = dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

