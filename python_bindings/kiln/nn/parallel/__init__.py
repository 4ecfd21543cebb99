"""kiln.nn.parallel: DataParallel and DistributedDataParallel, so scripts import them
unchanged. Building either raises NotImplementedError (kiln has no multi-device
training yet, issue 16; kiln.distributed.is_available() is False)."""

from ..modules.module import Module

__all__ = ["DataParallel", "DistributedDataParallel"]


class _Unsupported(Module):
    def __init__(self, module=None, *args, **kwargs):
        raise NotImplementedError(f"kiln.nn.parallel.{type(self).__name__}: multi-device "
                                  "training is not supported by kiln yet; use the module "
                                  "itself on one device")


class DataParallel(_Unsupported):
    pass


class DistributedDataParallel(_Unsupported):
    pass
