"""kiln.nn.parallel: DataParallel and DistributedDataParallel, so scripts import them
unchanged. DataParallel over one device (or none: the CPU) is what PyTorch's is there,
a wrapper that calls the module (kept at .module, so state_dict keys get PyTorch's
"module." prefix); over several devices, and DistributedDataParallel always, it raises
NotImplementedError (kiln has no multi-device training yet, issue 16;
kiln.distributed.is_available() is False)."""

from ..modules.module import Module

__all__ = ["DataParallel", "DistributedDataParallel"]


class DataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        from ... import cuda

        ids = list(range(cuda.device_count())) if device_ids is None else list(device_ids)
        if len(ids) > 1:
            raise NotImplementedError(f"kiln.nn.parallel.DataParallel over {len(ids)} devices "
                                      f"(device_ids={ids}): multi-device training is not "
                                      "supported by kiln yet; use the module on one device")
        self.module = module
        self.device_ids = ids
        self.output_device = output_device
        self.dim = dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


class DistributedDataParallel(Module):
    def __init__(self, module=None, *args, **kwargs):
        raise NotImplementedError("kiln.nn.parallel.DistributedDataParallel: multi-device "
                                  "training is not supported by kiln yet; use the module "
                                  "itself on one device")
