"""kiln.nn: layers in PyTorch spelling (Module, Linear, Conv2d, ...), kiln.nn.functional,
kiln.nn.init, kiln.nn.utils and kiln.nn.parallel."""

from . import functional, init  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules import __all__  # noqa: F401
from . import parallel, utils  # noqa: F401,E402
from .parallel import DataParallel  # noqa: F401,E402  (torch.nn.DataParallel)
