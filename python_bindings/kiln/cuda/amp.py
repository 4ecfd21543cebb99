"""kiln.cuda.amp: autocast(enabled=True, dtype=kiln.float16) and GradScaler, as
torch.cuda.amp (a pass-through GradScaler without a GPU)."""

from ..amp.autocast_mode import cuda_autocast as autocast  # noqa: F401
from ..amp.grad_scaler import GradScaler as _GradScaler


class GradScaler(_GradScaler):
    """torch.cuda.amp.GradScaler(init_scale=2**16, growth_factor=2.0, backoff_factor=0.5,
    growth_interval=2000, enabled=True)."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval,
                         enabled)
