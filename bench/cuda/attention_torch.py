"""PyTorch's SDPA forward (and float32 backward) times for the cases of bench/cuda/attention_harness.cu (the
same method: 3 warmup calls, then the mean of 20 calls between CUDA events). bfloat16
and float16 pin the flash backend (sdpa_kernel(SDPBackend.FLASH_ATTENTION)); float32,
which flash does not take, runs PyTorch's default choice (the memory-efficient kernel).

    python3 bench/cuda/attention_torch.py
"""

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

CASES = [("fp32", torch.float32, 16, 8, 1024, 64), ("bf16", torch.bfloat16, 16, 8, 1024, 64),
         ("fp16", torch.float16, 16, 8, 1024, 64), ("bf16", torch.bfloat16, 4, 16, 4096, 128)]

BACKWARD_CASES = [(16, 6, 256, 64, 0.2), (16, 8, 1024, 64, 0.0)]


def time_us(fn, iters=20):
    for _ in range(3):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return 1000.0 * a.elapsed_time(b) / iters


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
    for causal in (False, True):
        for name, dtype, B, H, L, D in CASES:
            q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=dtype) for _ in range(3))
            ctx = sdpa_kernel(SDPBackend.FLASH_ATTENTION) if dtype != torch.float32 \
                else contextlib.nullcontext()
            with ctx:
                us = time_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            flops = 4.0 * B * H * L * L * D * (0.5 if causal else 1.0)
            print(f"{name:6s} {B:2d}x{H:2d}x{L:4d}x{D:3d} causal={int(causal)}  "
                  f"torch fwd {us:9.1f} us  {flops / us * 1e-6:6.1f} TFLOP/s")
    # float32 backward (the memory-efficient kernel), the harness's backward cases: the
    # time of fwd + bwd minus the forward's (dropout's forward included in both).
    for causal in (False, True):
        for B, H, L, D, p in BACKWARD_CASES:
            q, k, v = (torch.randn(B, H, L, D, device="cuda", requires_grad=True)
                       for _ in range(3))
            g = torch.randn(B, H, L, D, device="cuda")

            def fwd():
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=p)

            def fwd_bwd():
                fwd().backward(g)

            f_us, fb_us = time_us(lambda: fwd()), time_us(fwd_bwd)
            print(f"bwd torch {B:2d}x{H:2d}x{L:4d}x{D:3d} causal={int(causal)} p={p:.1f}  "
                  f"{fb_us - f_us:9.1f} us (fwd {f_us:.1f}, fwd+bwd {fb_us:.1f})")


if __name__ == "__main__":
    main()
