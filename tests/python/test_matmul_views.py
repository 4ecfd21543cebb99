"""Batched and strided CPU matmul on views, against PyTorch CPU on fresh random inputs:
attention's q @ k^T and p @ v on 4-D views of a fused qkv projection (strided rows,
k transposed, heads as a batch dim), transposed 2-D operands as autograd passes them,
and the gradients through those views. Sizes cover both batched paths of
ops/cpu/matmul.cpp: entries spread whole over the threads (a batch that shares out
evenly) and a few large entries each split over the threads."""

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, randn, requires_torch, t, to_np, torch

pytestmark = requires_torch


def qkv_views(lib, x, heads):
    """[B, T, 3*H*D] -> q, k, v as [B, H, T, D] views (no copies)."""
    b, tokens, width = x.shape
    d = width // (3 * heads)
    q, kk, v = x.split(width // 3, dim=-1)
    return [y.reshape(b, tokens, heads, d).transpose(1, 2) for y in (q, kk, v)]


@pytest.mark.parametrize("b,heads,tokens,d", [
    (2, 8, 64, 32),    # 16 entries of 64x64x32: below the split size, spread over threads
    (2, 4, 128, 64),   # 8 entries of 1M multiply-adds: whole entries per thread
    (1, 3, 160, 64),   # 3 large entries: each GEMM split over the threads
])
def test_attention_on_qkv_views(rng, b, heads, tokens, d):
    x = randn(rng, b, tokens, 3 * heads * d)
    kq, kk, kv = qkv_views(kiln, k(x), heads)
    tq, tk, tv = qkv_views(torch, t(x), heads)
    assert not kq.is_contiguous() and not kk.transpose(-2, -1).is_contiguous()
    ks = kq @ kk.transpose(-2, -1)
    ts = tq @ tk.transpose(-2, -1)
    assert_close(ks, ts, rtol=1e-4, atol=1e-4)
    p = randn(rng, b, heads, tokens, tokens)
    assert_close(k(p) @ kv, t(p) @ tv, rtol=1e-4, atol=1e-4)
    # A transposed left operand (k^T @ q) and a transposed result-side view.
    assert_close(kk.transpose(-2, -1) @ kq, tk.transpose(-2, -1) @ tq, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,n,kk", [(7, 5, 3), (96, 80, 72), (300, 64, 200)])
@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
def test_transposed_2d_operands(rng, m, n, kk, ta, tb):
    a = randn(rng, kk, m) if ta else randn(rng, m, kk)
    b = randn(rng, n, kk) if tb else randn(rng, kk, n)
    ka, kb, ta_, tb_ = k(a), k(b), t(a), t(b)
    if ta:
        ka, ta_ = ka.t(), ta_.t()
    if tb:
        kb, tb_ = kb.t(), tb_.t()
    assert_close(ka @ kb, ta_ @ tb_, rtol=1e-4, atol=1e-4)


def test_batched_with_sliced_and_permuted_batch_dims(rng):
    # Batch dims in a permuted order and a sliced step: per-entry offsets, no copies.
    a = randn(rng, 6, 5, 70, 90)
    b = randn(rng, 5, 6, 90, 40)
    ka = k(a).permute(1, 0, 2, 3)[:, ::2]
    ta = t(a).permute(1, 0, 2, 3)[:, ::2]
    kb, tb = k(b)[:, ::2], t(b)[:, ::2]
    assert_close(ka @ kb, ta @ tb, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("b,heads,tokens,d", [(2, 4, 48, 16), (1, 2, 128, 64)])
def test_attention_gradients_through_views(rng, b, heads, tokens, d):
    x = randn(rng, b, tokens, 3 * heads * d)
    g = randn(rng, b, heads, tokens, d)
    kx, tx = k(x).requires_grad_(), t(x).requires_grad_()
    outs = []
    for lib, xx in ((kiln, kx), (torch, tx)):
        q, kk, v = qkv_views(lib, xx, heads)
        s = (q @ kk.transpose(-2, -1)) * (1.0 / d ** 0.5)
        outs.append(lib.softmax(s, -1) @ v)
    outs[0].backward(k(g))
    outs[1].backward(t(g))
    assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(to_np(kx.grad), to_np(tx.grad), rtol=1e-3, atol=1e-4)


def test_matmul_leaves_torch_thread_count(rng):
    # oneDNN (an OpenMP build) runs at one thread per call inside kiln's pool; the
    # calling thread's OpenMP thread count, which PyTorch reads, must come back as it was.
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a, b = randn(rng, 256, 300), randn(rng, 300, 200)
        assert_close(k(a) @ k(b), t(a) @ t(b), rtol=1e-4, atol=1e-4)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("m,kk,n,transposed_b", [
    (128, 1024, 1024, False),  # leading dims of 1024 floats: OpenBLAS (ops/cpu/blas_gemm.cpp)
    (64, 2048, 1024, True),    # linear's W^T with a 2048-float leading dim: OpenBLAS
    (128, 1000, 1000, False),  # the same sizes' neighbours: oneDNN where present
])
def test_page_multiple_leading_dims(rng, m, kk, n, transposed_b):
    """GEMMs whose rows are a multiple of 4 KiB apart take another library than their
    neighbours (onednn_suits): both give PyTorch's values, as matmul and as linear."""
    a = randn(rng, m, kk)
    b = randn(rng, n, kk) if transposed_b else randn(rng, kk, n)
    ka, kb, ta_, tb_ = k(a), k(b), t(a), t(b)
    if transposed_b:
        assert_close(kiln.nn.functional.linear(ka, kb), torch.nn.functional.linear(ta_, tb_),
                     rtol=1e-4, atol=1e-3)
        kb, tb_ = kb.t(), tb_.t()
    assert_close(ka @ kb, ta_ @ tb_, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("spin_us", ["0", "100000"])
def test_pool_spin_settings_give_the_same_values(spin_us):
    """KILN_POOL_SPIN_US=0 (workers sleep at once) and a spin longer than the run (they
    never sleep): split GEMMs, parallel pointwise ops and reductions give float64 numpy's
    values, in a process of their own (the pool reads the setting once)."""
    import os
    import subprocess
    import sys
    code = """
import numpy as np, kiln
rng = np.random.default_rng(5)
for i in range(30):
    a = rng.standard_normal((300, 200)).astype(np.float32)
    b = rng.standard_normal((200, 260)).astype(np.float32)
    y = (kiln.from_numpy(a) @ kiln.from_numpy(b)).relu().sum(dim=0)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0).sum(axis=0)
    assert np.allclose(y.numpy(), ref, rtol=1e-4, atol=1e-2), i
print("ok")
"""
    env = dict(os.environ, KILN_POOL_SPIN_US=spin_us, KILN_NUM_THREADS="2",
               PYTHONPATH=os.path.dirname(os.path.dirname(kiln.__file__)))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
