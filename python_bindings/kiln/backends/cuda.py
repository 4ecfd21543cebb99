"""kiln.backends.cuda.matmul.allow_tf32 (recorded; kiln's float32 matmuls are full
float32 whatever it says)."""


class _MatmulFlags:
    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _MatmulFlags()


def is_built():
    from .. import cuda as _cuda

    return _cuda.is_built()
