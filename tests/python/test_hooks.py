"""Tensor.register_hook, kiln.autograd.Function and the module hooks
(register_forward_(pre_)hook, register_full_backward_hook, register_full_backward_pre_hook)
against torch 1.13 on fresh random inputs: the gradients the hooks see, the gradients
their replacements produce, removal, and the errors. torch 1.13 has no
register_full_backward_pre_hook: its reference is a tensor hook on the module's output
(what the pre-hook is: a hook on grad_output before the module's backward)."""

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, torch

pytestmark = requires_torch
TOL = dict(rtol=1e-9, atol=1e-12)


def both(rng, *shape):
    a = rng.standard_normal(shape)
    return k(a).requires_grad_(True), t(a).requires_grad_(True)


# ---- Tensor.register_hook

@pytest.mark.parametrize("lib_steps", [1, 4])  # 4 backward passes: past the tracer's warmup
def test_tensor_hooks_replace_and_observe(rng, lib_steps):
    a = rng.standard_normal((3, 4))
    scale = rng.standard_normal((3, 4))
    for _ in range(lib_steps):
        res = {}
        for lib, make in (("k", k), ("t", t)):
            mod = kiln if lib == "k" else torch
            x = make(a).requires_grad_(True)
            seen = []
            x.register_hook(lambda g: seen.append(g.detach().clone()))    # observe only
            x.register_hook(lambda g: g * make(scale))                    # replace
            y = mod.tanh(x) * 3
            # retain_grad keeps the gradient after every hook (PyTorch 2's rule; 1.13 ran
            # it in registration order, the same here as the hook comes first)
            y.register_hook(lambda g: g + 1)
            y.retain_grad()
            z = (y * y).sum()
            z.backward()
            res[lib] = (x.grad, y.grad, seen[0])
        for kk, tt in zip(res["k"], res["t"]):
            assert_close(kk, tt, **TOL)


def test_hook_order_remove_and_context_manager(rng):
    xk, xt = both(rng, 5)
    for x, mod in ((xk, kiln), (xt, torch)):
        order = []
        h1 = x.register_hook(lambda g: order.append(1) or g * 2)
        x.register_hook(lambda g: order.append(2) or g * 3)
        h1.remove()
        h1.remove()  # a second remove is a no-op
        with x.register_hook(lambda g: order.append(3)):
            (x * x).sum().backward()
        (x * x).sum().backward()
        assert order == [2, 3, 2]
    assert_close(xk.grad, xt.grad, **TOL)


def test_grad_captures_before_the_hooks(rng):
    """autograd.grad returns the gradient of an input before that input's hooks (the
    hooks of tensors between run), as torch's engine does."""
    xk, xt = both(rng, 4)
    outs = []
    for x, mod in ((xk, kiln), (xt, torch)):
        x.register_hook(lambda g: g * 100)
        y = x * 3
        y.register_hook(lambda g: g * 10)
        z = (y * y).sum()
        outs.append(mod.autograd.grad(z, x, retain_graph=True)[0])
        outs.append(mod.autograd.grad(z, y)[0])
    assert_close(outs[0], outs[2], **TOL)
    assert_close(outs[1], outs[3], **TOL)


def test_hook_errors():
    for mod, err in ((kiln, RuntimeError), (torch, RuntimeError)):
        with pytest.raises(err, match="doesn't require grad"):
            mod.ones(2).register_hook(lambda g: g)
    x = kiln.ones(2, requires_grad=True)
    x.register_hook(lambda g: g[:1])
    with pytest.raises(RuntimeError, match="register_hook.*size"):
        (x * 2).sum().backward()
    y = kiln.ones(2, requires_grad=True)
    y.register_hook(lambda g: 3)
    with pytest.raises(TypeError, match="register_hook"):
        (y * 2).sum().backward()
    with pytest.raises(TypeError, match="register_hook"):
        y.register_hook(3)


# ---- kiln.autograd.Function

def _functions(mod):
    class Exp(mod.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):
            y = mod.exp(x) * scale
            ctx.save_for_backward(y)
            ctx.scale = scale
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y, None

    class SplitMax(mod.autograd.Function):
        """Two outputs, one non-differentiable (an index)."""

        @staticmethod
        def forward(ctx, a, b):
            s = a + b
            idx = s.argmax(dim=1)
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(a, b)
            return s * 2, idx

        @staticmethod
        def backward(ctx, g, gidx):
            a, b = ctx.saved_tensors
            assert ctx.needs_input_grad == (True, False)
            return g * 2 * b.sign(), g * 0

    return Exp, SplitMax


def test_custom_function_values_and_grads(rng):
    ak, at = both(rng, 3, 4)
    b = rng.standard_normal((3, 4))
    res = []
    for a, make, mod in ((ak, k, kiln), (at, t, torch)):
        Exp, SplitMax = _functions(mod)
        y = Exp.apply(a, 1.5)
        s, idx = SplitMax.apply(a, make(b))
        assert not idx.requires_grad and s.requires_grad and y.grad_fn is not None
        ((y * y).sum() + (s * s).sum()).backward()
        res.append((y, s, idx, a.grad))
    for kk, tt in zip(*res):
        assert_close(kk, tt.detach(), **TOL)


def test_custom_function_errors(rng):
    class Bad(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g  # one gradient for two inputs

    x = kiln.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="BadBackward.*incorrect number of gradients"):
        Bad.apply(x, x).sum().backward()
    with pytest.raises(RuntimeError, match="apply"):
        Bad()


# ---- module hooks

class _Net:
    """A two-layer net in either library with the same weights."""

    def __init__(self, rng, mod):
        self.l1, self.l2 = mod.nn.Linear(4, 5).double(), mod.nn.Linear(5, 3).double()
        for lin, shape in ((self.l1, (5, 4)), (self.l2, (3, 5))):
            w = rng.standard_normal(shape)
            with mod.no_grad():
                lin.weight.copy_(k(w) if mod is kiln else t(w))
                lin.bias.zero_()
        self.seq = mod.nn.Sequential(self.l1, mod.nn.Tanh(), self.l2)


@pytest.mark.parametrize("input_grad", [True, False])
def test_full_backward_hook(rng, input_grad):
    seed = int(rng.integers(2**31))
    x = rng.standard_normal((6, 4))
    res = []
    for mod, make in ((kiln, k), (torch, t)):
        net = _Net(np.random.default_rng(seed), mod)
        seen = []

        def hook(m, gin, gout):
            seen.append((type(m).__name__, gin, gout))
            if gin[0] is not None:
                return (gin[0] * 2,)

        net.l2.register_full_backward_hook(hook)
        net.l1.register_full_backward_hook(hook)
        xi = make(x).requires_grad_(input_grad)
        for _ in range(3):  # the tracer's warmup and replay
            seen.clear()
            for p in net.seq.parameters():
                p.grad = None
            (net.seq(xi) ** 2).sum().backward()
        res.append((seen, net.l1.weight.grad, net.l2.weight.grad, xi.grad))
    (sk, *gk), (st, *gt) = res
    assert [s[0] for s in sk] == [s[0] for s in st] == ["Linear", "Linear"]
    for (_, gin_k, gout_k), (_, gin_t, gout_t) in zip(sk, st):
        for a, b in zip(gin_k + gout_k, gin_t + gout_t):
            assert (a is None) == (b is None)
            if a is not None:
                assert_close(a, b, **TOL)
    for a, b in zip(gk, gt):
        assert (a is None) == (b is None)
        if a is not None:
            assert_close(a, b, **TOL)


def test_full_backward_pre_hook(rng):
    x = rng.standard_normal((6, 4))
    seed = int(rng.integers(2**31))
    res = []
    for mod, make in ((kiln, k), (torch, t)):
        net = _Net(np.random.default_rng(seed), mod)
        seen = []
        if mod is kiln:
            h = net.l2.register_full_backward_pre_hook(
                lambda m, gout: seen.append(gout[0]) or (gout[0] * 3,))
            out = net.seq(make(x))
        else:  # torch 1.13's equivalent: a hook on l2's output
            out = net.seq(make(x))
            out.register_hook(lambda g: seen.append(g) or g * 3)
        (out.sin()).sum().backward()
        res.append((seen[0], net.l1.weight.grad.clone(), net.l2.bias.grad.clone()))
        if mod is kiln:
            h.remove()
            net.l1.weight.grad = net.l2.bias.grad = None
            (net.seq(make(x)).sin()).sum().backward()
            res.append(net.l1.weight.grad)
    assert_close(res[0][0], res[2][0], **TOL)
    assert_close(res[0][1], res[2][1], **TOL)
    assert_close(res[0][2], res[2][2], **TOL)
    assert_close(res[1] * 3, res[2][1], **TOL)  # removed: the plain gradient


def test_backward_hook_multiple_outputs_and_non_tensor_args(rng):
    class Two:
        @staticmethod
        def make(mod):
            class M(mod.nn.Module):
                def forward(self, a, flag, b):
                    return a * b, flag, a.exp()
            return M()

    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    res = []
    for mod, make in ((kiln, k), (torch, t)):
        m = Two.make(mod)
        seen = []
        m.register_full_backward_hook(lambda mm, gin, gout: seen.append((gin, gout)))
        ak, bk = make(a).requires_grad_(True), make(b)
        p, _, q = m(ak, "x", bk)
        (p.sum() * 2 + q.sum()).backward()
        res.append((seen, ak.grad))
    (sk, gk), (st, gt) = res
    assert len(sk) == len(st) == 1
    (gin_k, gout_k), (gin_t, gout_t) = sk[0], st[0]
    assert len(gin_k) == len(gin_t) == 3 and len(gout_k) == len(gout_t) == 3
    for a_, b_ in zip(gin_k + gout_k, gin_t + gout_t):
        assert (a_ is None) == (b_ is None)
        if a_ is not None:
            assert_close(a_, b_, **TOL)
    assert_close(gk, gt, **TOL)


def test_backward_hook_wrong_count():
    m = kiln.nn.Linear(2, 2)
    m.register_full_backward_hook(lambda mod, gin, gout: (gin[0], gin[0]))
    x = kiln.ones(1, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="invalid number of grad_input"):
        m(x).sum().backward()
