"""kiln.cpu.amp.autocast(enabled=True, dtype=kiln.bfloat16), as torch.cpu.amp."""

from ..amp.autocast_mode import cpu_autocast as autocast  # noqa: F401
