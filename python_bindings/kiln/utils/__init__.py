"""kiln.utils: gradient checkpointing (kiln.utils.checkpoint(fn, *args))."""

from .checkpoint import checkpoint  # noqa: F401
