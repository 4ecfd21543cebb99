"""kiln.utils: gradient checkpointing (kiln.utils.checkpoint(fn, *args)) and
kiln.utils.data (datasets and the DataLoader)."""

from . import data  # noqa: F401
from .checkpoint import checkpoint  # noqa: F401
