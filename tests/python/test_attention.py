"""The fused scaled_dot_product_attention (ops/attention_layout.h): values and gradients
against PyTorch CPU in float64 (the composite softmax(q k^T * scale + mask) v computed
by torch), on fresh random inputs: causal, bool and float masks, explicit scale,
non-contiguous q/k/v, L != S, Ev != E, sizes that cross the CPU tiles (64 queries, 128
keys), broadcast batch dims, the traced path, bad input. The CUDA leg compares the GPU
op with kiln's CPU op (tested here against PyTorch) and float64 numpy."""

import json
import math

import numpy as np
import pytest

import kiln
import kiln.nn.functional as KF
from helpers import assert_close, k, requires_cuda, requires_torch, t, to_np, torch


def torch_reference(q, kk, v, mask=None, causal=False, scale=None):
    """float64 torch: the unfused formula, with autograd."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ kk.transpose(-2, -1) * scale
    if causal:
        L, S = q.shape[-2], kk.shape[-2]
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool \
            else scores + mask
    return torch.softmax(scores, -1) @ v


def leaves(rng, shapes, dtype):
    arrays = [rng.standard_normal(s) for s in shapes]
    kl = [k(a.astype(dtype), requires_grad=True) for a in arrays]
    tl = [t(a).requires_grad_(True) for a in arrays]  # float64
    return kl, tl


def check(rng, q_shape, k_shape, v_shape, dtype=np.float32, mask=None, causal=False,
          scale=None, tol=None):
    (kq, kk, kv), (tq, tk, tv) = leaves(rng, [q_shape, k_shape, v_shape], dtype)
    kmask = tmask = None
    if mask is not None:
        tmask = t(mask)
        kmask = k(mask if mask.dtype == bool else mask.astype(dtype))
    got = KF.scaled_dot_product_attention(kq, kk, kv, attn_mask=kmask, is_causal=causal,
                                          scale=scale)
    expected = torch_reference(tq, tk, tv, tmask, causal, scale)
    rtol, atol = tol or ((1e-4, 1e-5) if dtype == np.float32 else (1e-10, 1e-12))
    assert_close(got, expected.detach().numpy().astype(dtype), rtol=rtol, atol=atol)
    g = rng.standard_normal(tuple(expected.shape))
    got.backward(k(g.astype(dtype)))
    expected.backward(t(g))
    for name, a, b in (("q", kq, tq), ("k", kk, tk), ("v", kv, tv)):
        assert a.grad is not None, name
        assert_close(a.grad, b.grad.numpy().astype(dtype), rtol=rtol * 10, atol=atol * 10)


@requires_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sizes", [(2, 3, 5, 5, 8, 8), (1, 2, 7, 11, 8, 6), (2, 1, 67, 131, 5, 9),
                                   (1, 1, 1, 1, 1, 1), (1, 2, 130, 70, 16, 16)])
def test_values_and_grads(rng, dtype, causal, sizes):
    B, H, L, S, E, Ev = sizes
    check(rng, (B, H, L, E), (B, H, S, E), (B, H, S, Ev), dtype, causal=causal)


@requires_torch
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(9, 13), (2, 1, 9, 13), (1, 13)])
def test_bool_mask(rng, causal, shape):
    mask = rng.random(shape) < 0.7
    mask[..., 0] = True  # no row without a key (causal keeps key 0 too)
    check(rng, (2, 3, 9, 8), (2, 3, 13, 8), (2, 3, 13, 8), mask=mask, causal=causal)


@requires_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_mask_and_scale(rng, dtype):
    mask = rng.standard_normal((3, 1, 70, 150))
    check(rng, (3, 4, 70, 12), (3, 4, 150, 12), (3, 4, 150, 7), dtype, mask=mask, scale=0.37)


@requires_torch
def test_broadcast_batch_dims(rng):
    check(rng, (2, 3, 6, 4), (1, 3, 9, 4), (3, 9, 5))


@requires_torch
@pytest.mark.parametrize("causal", [False, True])
def test_three_batch_dims_and_none(rng, causal):
    # grads of rank 5 (three batch dims, L == S) are the stacked layout on the CPU, not
    # the CUDA kernel's interleaved one; and inputs with no batch dim at all
    check(rng, (2, 2, 3, 5, 8), (2, 2, 3, 5, 8), (2, 2, 3, 5, 8), causal=causal)
    check(rng, (7, 8), (7, 8), (7, 6), causal=causal)


@requires_torch
@pytest.mark.parametrize("causal", [False, True])
def test_non_contiguous_views_from_a_qkv_projection(rng, causal):
    """nanoGPT: q, k, v = (x @ W).split(C, -1), each .view(B, T, H, hd).transpose(1, 2)."""
    B, T, H, hd = 2, 37, 3, 8
    C = H * hd
    x, w = rng.standard_normal((B, T, C)), rng.standard_normal((C, 3 * C)) / math.sqrt(C)
    g = rng.standard_normal((B, H, T, hd))

    def run(lib, xt, wt):
        qkv = xt @ wt
        q, kk, v = qkv.split(C, dim=2)
        q, kk, v = (z.view(B, T, H, hd).transpose(1, 2) for z in (q, kk, v))
        if lib is torch:
            return torch_reference(q, kk, v, causal=causal)
        assert not q.is_contiguous()
        return KF.scaled_dot_product_attention(q, kk, v, is_causal=causal)

    kx, kw = k(x.astype(np.float32), requires_grad=True), k(w.astype(np.float32),
                                                          requires_grad=True)
    tx, tw = t(x).requires_grad_(True), t(w).requires_grad_(True)
    got, expected = run(kiln, kx, kw), run(torch, tx, tw)
    assert_close(got, expected.detach().numpy().astype(np.float32), rtol=1e-4, atol=1e-5)
    got.backward(k(g.astype(np.float32)))
    expected.backward(t(g))
    assert_close(kx.grad, tx.grad.numpy().astype(np.float32), rtol=1e-3, atol=1e-4)
    assert_close(kw.grad, tw.grad.numpy().astype(np.float32), rtol=1e-3, atol=1e-4)


@requires_torch
def test_bfloat16_within_its_precision(rng):
    q, kk, v = (rng.standard_normal((2, 2, 33, 16)) for _ in range(3))
    got = KF.scaled_dot_product_attention(*(k(a.astype(np.float32)).to(kiln.bfloat16)
                                            for a in (q, kk, v)), is_causal=True)
    assert got.dtype == kiln.bfloat16
    expected = torch_reference(t(q), t(kk), t(v), causal=True).numpy()
    np.testing.assert_allclose(to_np(got), expected, rtol=2e-2, atol=2e-2)


@requires_torch
def test_raw_rows_packed_layout_and_logsumexp(rng):
    """kiln.attention's packed result: the output rows, then the float logsumexp rows."""
    q, kk, v = (rng.standard_normal((2, 5, 8)).astype(np.float32) for _ in range(3))
    packed = kiln.attention(k(q), k(kk), k(v), None, True, 0.5)
    assert tuple(packed.shape) == (2, 5 + 1, 8)  # 5 floats of logsumexp fit in one row
    out = kiln.attention_output(packed, k(q), k(kk), k(v), None, True, 0.5)
    s = t(q) @ t(kk).transpose(-2, -1) * 0.5
    s = s.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    assert_close(out, torch.softmax(s, -1) @ t(v), rtol=1e-5, atol=1e-6)
    lse = to_np(packed)[:, 5, :5]
    np.testing.assert_allclose(lse, torch.logsumexp(s, -1).numpy(), rtol=1e-5, atol=1e-6)
    grads = kiln.attention_backward(k(np.ones((2, 5, 8), np.float32)), packed, k(q), k(kk),
                                    k(v), None, True, 0.5)
    assert tuple(grads.shape) == (2, 5 + 2 * 5, 8)


def test_is_one_fused_op_and_dropout_takes_the_composite(rng):
    q = k(rng.standard_normal((1, 2, 4, 8)).astype(np.float32), requires_grad=True)
    out = KF.scaled_dot_product_attention(q, q, q)
    assert "AttentionOutput" in str(out.grad_fn) or "attention_output" in str(out.grad_fn)
    dropped = KF.scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    assert np.all(to_np(dropped) == 0)  # every weight dropped: only the composite does this


def test_traced_forward_and_backward_match_eager(rng):
    q, kk, v = (rng.standard_normal((2, 2, 20, 8)).astype(np.float32) for _ in range(3))

    def step(q, kk, v):
        out = KF.scaled_dot_product_attention(q, kk, v, is_causal=True)
        (out * out).sum().backward()
        return out

    def grads(fn):
        ins = [k(a, requires_grad=True) for a in (q, kk, v)]
        out = fn(*ins)
        return [to_np(out)] + [to_np(x.grad) for x in ins]

    eager = grads(step)
    traced_fn = kiln.compile(step)
    for _ in range(4):  # past warmup into replays of the compiled trace
        traced = grads(traced_fn)
    for a, b in zip(traced, eager):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("args, message", [
    (((2, 3, 5, 8), (2, 3, 6, 7), (2, 3, 6, 8)), "key of shape [2, 3, 6, 8], got [2, 3, 6, 7]"),
    (((2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 4, 8)), "value of shape [2, 3, 6, 8], got [2, 3, 4, 8]"),
    (((8,), (2, 3, 6, 8), (2, 3, 6, 8)), "query with at least 2 dims"),
])
def test_bad_shapes_name_the_op_and_argument(args, message):
    q, kk, v = (kiln.zeros(s) for s in args)
    with pytest.raises(Exception) as err:
        KF.scaled_dot_product_attention(q, kk, v)
    assert "attention" in str(err.value) and message in str(err.value)


def test_bad_mask_names_the_argument():
    q = kiln.zeros(2, 3, 5, 8)
    with pytest.raises(Exception, match=r"attn_mask.*\[4, 6\].*\[2, 3, 5, 6\]"):
        KF.scaled_dot_product_attention(q, kiln.zeros(2, 3, 6, 8), kiln.zeros(2, 3, 6, 8),
                                        attn_mask=kiln.zeros(4, 6, dtype=kiln.bool))
    with pytest.raises(Exception, match="attn_mask of dtype bool or floating, got int64"):
        KF.scaled_dot_product_attention(q, q, q, attn_mask=kiln.zeros(5, 5, dtype=kiln.int64))


# ---- CUDA: against kiln's CPU op and float64 numpy (torch is not importable there)


def numpy_reference(q, kk, v, causal):
    s = q @ np.swapaxes(kk, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@requires_cuda
@pytest.mark.parametrize("dtype, tol", [(kiln.float32, 1e-4), (kiln.bfloat16, 2e-2)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sizes", [(2, 3, 70, 70, 64, 64), (1, 2, 33, 129, 64, 64)])
def test_cuda_matches_cpu_and_float64(rng, dtype, tol, causal, sizes):
    B, H, L, S, E, Ev = sizes
    arrays = [rng.standard_normal(s) for s in ((B, H, L, E), (B, H, S, E), (B, H, S, Ev))]
    g = rng.standard_normal((B, H, L, Ev))
    results = {}
    for dev in ("cpu", "cuda"):
        ins = [k(a.astype(np.float32)).to(dtype).to(dev).requires_grad_(True) for a in arrays]
        out = KF.scaled_dot_product_attention(*ins, is_causal=causal)
        out.backward(k(g.astype(np.float32)).to(dtype).to(dev))
        results[dev] = [to_np(out.float())] + [to_np(x.grad.float()) for x in ins]
    np.testing.assert_allclose(results["cuda"][0], numpy_reference(*arrays, causal),
                               rtol=tol, atol=tol)
    for a, b in zip(results["cuda"], results["cpu"]):
        np.testing.assert_allclose(a, b, rtol=tol * 10, atol=tol * 10)


def dropout_reference(q, kk, v, g, causal, p, seed):
    """float64 numpy forward and gradients of dropout(softmax(q k^T / sqrt(E))) v with the
    mask kiln.rand draws on the CPU after kiln.manual_seed(seed) (the state the fused op
    takes)."""
    kiln.manual_seed(seed)
    B, H, L, _ = q.shape
    S = kk.shape[-2]
    z = (to_np(kiln.rand(B, H, L, S)) >= p) / (1.0 - p)
    s = q @ np.swapaxes(kk, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones((L, S), dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    pr = e / e.sum(-1, keepdims=True)
    out = (pr * z) @ v
    dv = np.swapaxes(pr * z, -1, -2) @ g
    dp = (g @ np.swapaxes(v, -1, -2)) * z
    ds = pr * (dp - (pr * dp).sum(-1, keepdims=True)) / math.sqrt(q.shape[-1])
    return out, ds @ kk, np.swapaxes(ds, -1, -2) @ q, dv


@pytest.mark.parametrize("causal", [False, True])
def test_cpu_dropout_composite_against_float64(rng, causal):
    B, H, L, S, E = 2, 2, 9, 11, 8
    q, kk, v = (rng.standard_normal(s) for s in ((B, H, L, E), (B, H, S, E), (B, H, S, E)))
    g = rng.standard_normal((B, H, L, E))
    ins = [k(a.astype(np.float32), requires_grad=True) for a in (q, kk, v)]
    kiln.manual_seed(7)
    out = KF.scaled_dot_product_attention(*ins, is_causal=causal, dropout_p=0.3)
    out.backward(k(g.astype(np.float32)))
    expected = dropout_reference(q, kk, v, g, causal, 0.3, 7)
    for got, want in zip([out] + [x.grad for x in ins], expected):
        np.testing.assert_allclose(to_np(got), want, rtol=1e-4, atol=1e-5)
    assert np.mean(to_np(out) == 0) < 0.5  # dropped weights, not dropped rows


@requires_cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sizes", [(2, 3, 70, 70, 64), (1, 2, 33, 129, 128), (2, 6, 256, 256, 64)])
def test_cuda_fused_dropout_against_float64_and_the_cpu_composite(rng, causal, sizes):
    """Forward and backward inside the fused kernels draw the composite's mask."""
    B, H, L, S, E = sizes
    q, kk, v = (rng.standard_normal(s) for s in ((B, H, L, E), (B, H, S, E), (B, H, S, E)))
    g = rng.standard_normal((B, H, L, E))
    results = {}
    for dev in ("cpu", "cuda"):
        ins = [k(a.astype(np.float32)).to(dev).requires_grad_(True) for a in (q, kk, v)]
        kiln.manual_seed(11)
        out = KF.scaled_dot_product_attention(*ins, is_causal=causal, dropout_p=0.2)
        out.backward(k(g.astype(np.float32)).to(dev))
        results[dev] = [to_np(out)] + [to_np(x.grad) for x in ins]
    expected = dropout_reference(q, kk, v, g, causal, 0.2, 11)
    for got, cpu, want in zip(results["cuda"], results["cpu"], expected):
        scale = np.abs(want).max()
        assert np.abs(got - want).max() <= 1e-4 * scale, np.abs(got - want).max() / scale
        assert np.abs(cpu - want).max() <= 1e-4 * scale


@requires_cuda
def test_cuda_traced_dropout_attention_replays_in_a_graph_with_each_steps_mask(rng):
    """A plain training-style loop: every replay draws a new mask (a new generator state)
    through the graph's random-state slot, without re-capturing the graph."""
    B, H, L, E = 2, 2, 64, 64
    arrays = [rng.standard_normal((B, H, L, E)) for _ in range(3)]
    g = rng.standard_normal((B, H, L, E))
    kiln.reset()
    for it in range(8):
        ins = [k(a.astype(np.float32)).to("cuda").requires_grad_(True) for a in arrays]
        kiln.manual_seed(100 + it)
        out = KF.scaled_dot_product_attention(*ins, is_causal=True, dropout_p=0.25)
        out.backward(k(g.astype(np.float32)).to("cuda"))
        got = [to_np(out)] + [to_np(x.grad) for x in ins]
        want = dropout_reference(*arrays, g, True, 0.25, 100 + it)
        for a, b in zip(got, want):
            assert np.abs(a - b).max() <= 1e-4 * np.abs(b).max()
    report = json.loads(kiln.explain().json())
    attention = [t for t in report["traces"] if "attention" in t["ops"]]
    assert attention and all(t["replays"] > 0 for t in attention), report["traces"]
    notes = [n for t in attention for n in t.get("notes", [])]
    assert not any(n.startswith("cuda graph off") for n in notes), notes
    captured = [n for n in notes if "re-capture(s)" in n]
    assert captured and all(" 0 re-capture" in n for n in captured), notes
