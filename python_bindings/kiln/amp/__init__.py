"""kiln.amp: autocast and GradScaler (torch.amp's spellings; see autocast_mode.py for
which ops autocast and grad_scaler.py for when scaling is a pass-through)."""

from .autocast_mode import autocast, get_autocast_dtype, is_autocast_enabled  # noqa: F401
from .grad_scaler import GradScaler  # noqa: F401
