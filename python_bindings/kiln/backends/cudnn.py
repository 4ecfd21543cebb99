"""kiln.backends.cudnn.{enabled, allow_tf32, benchmark, deterministic}: recorded for
PyTorch compatibility; kiln does not use cuDNN (is_available() is False)."""

enabled = True
allow_tf32 = True
benchmark = False
deterministic = False


def is_available():
    return False


def version():
    return None
