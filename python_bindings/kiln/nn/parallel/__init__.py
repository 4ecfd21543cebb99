"""kiln.nn.parallel: DistributedDataParallel (one process per device, over
kiln.distributed) and DataParallel, kept so scripts import it (building it raises
NotImplementedError: kiln has no single-process multi-device training)."""

from ..modules.module import Module
from .distributed import DistributedDataParallel

__all__ = ["DataParallel", "DistributedDataParallel"]


class DataParallel(Module):
    def __init__(self, module=None, *args, **kwargs):
        raise NotImplementedError("kiln.nn.parallel.DataParallel: single-process multi-device "
                                  "training is not supported by kiln; use "
                                  "DistributedDataParallel (one process per device)")
