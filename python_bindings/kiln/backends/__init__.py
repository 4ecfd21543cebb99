"""kiln.backends: torch.backends' switches. They are recorded (scripts set and read
them) and change nothing in kiln: its float32 matmuls never use TF32, and it has no
cuDNN autotuner or nondeterministic kernels to switch."""

from . import cuda, cudnn  # noqa: F401
