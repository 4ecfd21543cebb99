"""The JIT's attention pass (jit/attention_rewrite.h) from Python: attention written out by
hand, as bench/cpu_workloads.py's workload and GPT code write it, compiled by kiln.compile,
is one fused attention step (explain() notes it) whose results equal eager kiln and
PyTorch CPU in float64 on fresh random inputs: no mask, an additive mask, the causal mask
by masked_fill of aranges, a tril buffer's mask (a bool mask, not provably causal); the
cases it leaves alone (the weights returned too, softmax over dim -2, a training step
whose backward reads the softmax) still equal both;
set_config(jit_disable="attention") switches it off. On the CPU the pass runs only with
set_config(cpu_attention=True) (KILN_JIT_CPU_ATTENTION=1); the CUDA test (skipped
without a GPU) runs it where it is on by default."""

import json
import math

import numpy as np
import pytest

import kiln
import kiln.nn.functional as KF
from helpers import k, requires_cuda, requires_torch, t, to_np, torch

pytestmark = pytest.mark.usefixtures("fresh_tracer")

FUSED = "as one fused attention op"


@pytest.fixture
def cpu_attention():
    previous = kiln.set_config(cpu_attention=True)
    yield
    kiln.set_config(**previous)


def workload(F):
    """bench/cpu_workloads.py's attention, for kiln (F = kiln.nn.functional) or torch."""
    def attention(q, kk, v):
        s = (q @ kk.transpose(-2, -1)) / (q.size(-1) ** 0.5)
        return F.softmax(s, dim=-1) @ v
    return attention


def additive(F):
    def attention(q, kk, v, mask):
        return F.softmax(q @ kk.transpose(-2, -1) * 0.2 + mask, dim=-1) @ v
    return attention


def causal_aranges(lib, F):
    """GPT's masked_fill with the mask made from aranges (provably causal)."""
    def attention(q, kk, v):
        T = q.size(-2)
        at = lib.arange(T, device=q.device)
        future = at.unsqueeze(0) > at.unsqueeze(1)
        att = (q @ kk.transpose(-2, -1)) * (1.0 / math.sqrt(kk.size(-1)))
        return F.softmax(att.masked_fill(future, float("-inf")), dim=-1) @ v
    return attention


def causal_buffer(F):
    """nanoGPT's masked_fill with its tril buffer (an input: a bool mask to the pass)."""
    def attention(q, kk, v, bias):
        T = q.size(-2)
        att = (q @ kk.transpose(-2, -1)) * (1.0 / math.sqrt(kk.size(-1)))
        att = att.masked_fill(bias[:, :, :T, :T] == 0, float("-inf"))
        return F.softmax(att, dim=-1) @ v
    return attention


def weights_too(F):
    def attention(q, kk, v):
        att = F.softmax(q @ kk.transpose(-2, -1) * 0.25, dim=-1)
        return att @ v, att
    return attention


def wrong_dim(F):
    def attention(q, kk, v):
        return F.softmax(q @ kk.transpose(-2, -1) * 0.25, dim=-2) @ v
    return attention


def notes():
    return [n for tr in json.loads(kiln.explain().json())["traces"] for n in tr.get("notes", [])]


def eager(fn, *args):
    kiln.set_tracing(False)
    try:
        out = fn(*args)
        return [to_np(o) for o in out] if isinstance(out, tuple) else to_np(out)
    finally:
        kiln.set_tracing(True)


def run(kfn, tfn, arrays, fused, how="", device="cpu", tol=(1e-4, 1e-5)):
    """kfn compiled (4 calls) against kiln eager and torch float64; whether the pass fused."""
    kin = [k(a.astype(np.float32)).to(device) for a in arrays]
    f = kiln.compile(kfn)
    for _ in range(4):
        got = f(*kin)
    got = [to_np(o) for o in got] if isinstance(got, tuple) else [to_np(got)]
    ref = eager(kfn, *kin)
    ref = ref if isinstance(ref, list) else [ref]
    want = tfn(*[t(a) for a in arrays])
    want = [w.numpy() for w in want] if isinstance(want, tuple) else [want.numpy()]
    for g, r, w in zip(got, ref, want):
        np.testing.assert_allclose(g, r, rtol=tol[0], atol=tol[1])
        np.testing.assert_allclose(g, w, rtol=tol[0], atol=tol[1])
    fused_notes = [n for n in notes() if FUSED in n]
    assert bool(fused_notes) == fused, str(kiln.explain())
    if fused and how:
        assert how in fused_notes[0], fused_notes


def qkv(rng, B=2, H=4, L=48, E=16):
    return [rng.standard_normal((B, H, L, E)) for _ in range(3)]


@requires_torch
def test_bench_workload_is_one_fused_step(rng, cpu_attention):
    run(workload(KF), workload(torch.nn.functional), qkv(rng, 2, 8, 64, 64), True)
    assert kiln.explain().traces[0]["kernels"] == 1, str(kiln.explain())


@requires_torch
@pytest.mark.parametrize("mask_shape", [(48, 48), (2, 1, 48, 48)])
def test_additive_mask(rng, cpu_attention, mask_shape):
    arrays = qkv(rng) + [rng.standard_normal(mask_shape)]
    run(additive(KF), additive(torch.nn.functional), arrays, True, "(additive mask)")


@requires_torch
def test_causal_masked_fill_of_aranges(rng, cpu_attention):
    run(causal_aranges(kiln, KF), causal_aranges(torch, torch.nn.functional), qkv(rng), True,
        "(causal)")


@requires_torch
def test_causal_buffer_is_a_bool_mask(rng, cpu_attention):
    bias = np.tril(np.ones((64, 64))).reshape(1, 1, 64, 64)
    run(causal_buffer(KF), causal_buffer(torch.nn.functional), qkv(rng) + [bias], True,
        "(bool mask)")


@requires_torch
@pytest.mark.parametrize("case", [weights_too, wrong_dim], ids=["weights_too", "wrong_dim"])
def test_left_alone(rng, cpu_attention, case):
    run(case(KF), case(torch.nn.functional), qkv(rng), False)


@requires_torch
def test_training_step_with_its_backward_is_left_alone(rng, cpu_attention):
    """The backward reads the softmax output: the forward stays as written, and the
    traced step's output and gradients equal torch's."""
    arrays = qkv(rng, 2, 2, 32, 16)
    g = rng.standard_normal((2, 2, 32, 16))
    leaves = [k(a.astype(np.float32), requires_grad=True) for a in arrays]
    gk = k(g.astype(np.float32))

    def step():
        for x in leaves:
            x.grad = None
        y = workload(KF)(*leaves)
        (y * gk).sum().backward()
        return y

    f = kiln.compile(step)
    for _ in range(4):
        y = f()
    assert kiln.explain().traces, str(kiln.explain())
    assert not [n for n in notes() if FUSED in n], notes()
    tl = [t(a).requires_grad_(True) for a in arrays]
    ty = workload(torch.nn.functional)(*tl)
    (ty * t(g)).sum().backward()
    np.testing.assert_allclose(to_np(y), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    for a, b in zip(leaves, tl):
        np.testing.assert_allclose(to_np(a.grad), b.grad.numpy(), rtol=1e-4, atol=1e-5)


@requires_torch
def test_switched_off_by_name_and_off_on_the_cpu_by_default(rng, cpu_attention):
    previous = kiln.set_config(jit_disable="attention")
    try:
        run(workload(KF), workload(torch.nn.functional), qkv(rng), False)
        assert any("KILN_JIT_DISABLE): attention" in n for n in notes()), notes()
    finally:
        kiln.set_config(**previous)
    kiln.reset()
    kiln.set_config(cpu_attention=False)
    run(workload(KF), workload(torch.nn.functional), qkv(rng), False)


@requires_torch
@requires_cuda
@pytest.mark.parametrize("case", ["workload", "causal"])
def test_cuda_pattern_is_one_fused_step(rng, case):
    """On the GPU the pass is on by default: float32 through 3xTF32, against torch float64."""
    kfn, tfn = ((workload(KF), workload(torch.nn.functional)) if case == "workload" else
                (causal_aranges(kiln, KF), causal_aranges(torch, torch.nn.functional)))
    run(kfn, tfn, qkv(rng, 2, 8, 256, 64), True, device="cuda", tol=(2e-4, 2e-5))
