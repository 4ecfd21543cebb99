"""Row kernels with dropout and attention at the GPT's sizes (batch 16, 6 heads, context
256, head dim 64), kiln or PyTorch: mean time per call of a plain eager-style loop (200
calls after 30 warmup calls, the last 3 results held), forward only unless named fwd_bwd.

    python3 bench/cuda/rows_and_attention.py kiln [case ...]    # kiln (traced plain loop)
    python3 bench/cuda/rows_and_attention.py torch [case ...]   # PyTorch eager, TF32 off

Run both in one device call (scripts/gpu_run.sh KILN_GPU_STEPS=script for kiln, the
machine's python3 for torch) and compare the lines side by side.
"""
import sys, time, os
fwname = sys.argv[1]
if fwname == "kiln":
    import kiln as fw
else:
    import torch as fw
    fw.backends.cuda.matmul.allow_tf32 = False
F = fw.nn.functional
dev = "cuda"
def sync():
    fw.cuda.synchronize()
x = fw.randn(16, 6, 256, 256, device=dev)
h = fw.randn(16, 256, 384, device=dev)
r = fw.randn(16, 256, 384, device=dev)
w = fw.randn(384, device=dev)
q = fw.randn(16, 6, 256, 64, device=dev)
k = fw.randn(16, 6, 256, 64, device=dev)
v = fw.randn(16, 6, 256, 64, device=dev)
qg = fw.randn(16, 6, 256, 64, device=dev).requires_grad_(True)
kg = fw.randn(16, 6, 256, 64, device=dev).requires_grad_(True)
vg = fw.randn(16, 6, 256, 64, device=dev).requires_grad_(True)
gg = fw.randn(16, 6, 256, 64, device=dev)
def fwd_bwd(p):
    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, dropout_p=p)
    out.backward(gg)
    return qg.grad
cases = {
    "softmax": lambda: F.softmax(x, -1),
    "dropout": lambda: F.dropout(x, 0.2, True),
    "softmax_dropout": lambda: F.dropout(F.softmax(x, -1), 0.2, True),
    "masked_softmax_dropout": lambda: F.dropout(F.softmax(x.masked_fill(fw.ones(256, 256, device=dev).tril() == 0, float("-inf")), -1), 0.2, True),
    "ln": lambda: F.layer_norm(h + r, (384,), w, None, 1e-5),
    "ln_dropout": lambda: F.layer_norm(F.dropout(h, 0.2, True) + r, (384,), w, None, 1e-5),
    "sdpa_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "sdpa_causal_dropout": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.2),
    "sdpa_fwd_bwd_dropout": lambda: fwd_bwd(0.2),
    "sdpa_fwd_bwd": lambda: fwd_bwd(0.0),
    "qkT": lambda: q @ k.transpose(-2, -1),
    "transpose_copy": lambda: h.view(16, 256, 6, 64).transpose(1, 2).contiguous(),
}
only = sys.argv[2:] 
for name, fn in cases.items():
    if only and name not in only: continue
    held = []
    for _ in range(30):
        held.append(fn())
        if len(held) > 3: held.pop(0)
    sync()
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        held.append(fn())
        if len(held) > 3: held.pop(0)
    sync()
    dt = (time.perf_counter() - t0) / n * 1e6
    print(f"{fwname:6s} {name:24s} {dt:8.1f} us/iter", flush=True)
