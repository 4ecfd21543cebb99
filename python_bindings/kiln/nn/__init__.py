"""kiln.nn: layers in PyTorch spelling (Module, Linear, Conv2d, ...), kiln.nn.functional
and kiln.nn.init."""

from . import functional, init
from .modules import *  # noqa: F401,F403
from .modules import __all__  # noqa: F401
