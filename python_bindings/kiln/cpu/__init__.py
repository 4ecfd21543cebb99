"""kiln.cpu: torch.cpu's spellings (kiln.cpu.amp.autocast)."""

from . import amp  # noqa: F401


def is_available():
    return True


def synchronize(device=None):
    """kiln's CPU work runs synchronously: nothing to wait for."""
