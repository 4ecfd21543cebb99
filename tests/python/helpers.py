"""Helpers shared by the tests (imported as `from helpers import ...`)."""

import os

import numpy as np
import pytest

import kiln

try:
    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
except ImportError:  # the GPU machine's Python 3.11 has numpy only
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not importable here")
requires_cuda = pytest.mark.skipif(not kiln.cuda.is_available(), reason="no CUDA device")


def randn(rng, *shape, dtype=np.float32):
    """Standard normal values, never all zeros."""
    return rng.standard_normal(shape).astype(dtype)


def k(a, **kw):
    """numpy array -> kiln tensor (a copy)."""
    return kiln.tensor(np.asarray(a), **kw)


def t(a):
    """numpy array -> torch tensor (a copy)."""
    return torch.from_numpy(np.array(a, copy=True))


def to_np(x):
    """kiln or torch tensor -> numpy array (a copy on the host)."""
    if isinstance(x, kiln.Tensor):
        if x.dtype == kiln.bfloat16:
            x = x.float()
        return np.array(x.cpu().numpy(), copy=True)
    if torch is not None and isinstance(x, torch.Tensor):
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.detach().cpu().numpy().copy()
    return np.asarray(x)


def assert_close(actual, expected, rtol=1e-5, atol=1e-6, check_dtype=True):
    """actual: kiln tensor; expected: torch tensor or numpy array. Shapes must match;
    dtypes must correspond (kiln.float32 <-> float32) when check_dtype."""
    a = to_np(actual)
    e = to_np(expected)
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    if check_dtype:
        ed = expected.dtype
        if torch is not None and isinstance(expected, torch.Tensor):
            assert str(actual.dtype).split(".")[-1] == str(ed).split(".")[-1], \
                f"dtype {actual.dtype} != expected {ed}"
        else:
            assert to_np(actual).dtype == e.dtype or actual.dtype == kiln.bfloat16, \
                f"dtype {actual.dtype} != expected {e.dtype}"
    if a.dtype == np.bool_ or e.dtype == np.bool_:
        np.testing.assert_array_equal(a, e)
    else:
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol,
                                   atol=atol)


DTYPE_PAIRS = [
    ("float32", np.float32),
    ("float64", np.float64),
    ("int32", np.int32),
    ("int64", np.int64),
    ("bool", np.bool_),
]


# ---- CUDA legs: kiln on the GPU against kiln on the CPU (no torch needed)
#
# The GPU machine's Python has no PyTorch, so the torch-oracle tests skip there. A CUDA
# leg runs an op on CUDA tensors and compares with the same op on CPU tensors made from
# the same numpy inputs (the CPU result is what the torch-oracle tests check here),
# gradients too. Tests take the `cuda_leg` fixture (conftest.py) for the device: "cuda",
# skipped where kiln.cuda.is_available() is false. KILN_TEST_CUDA_LEG_DEVICE=cpu runs the
# legs on the CPU instead, which exercises the comparison machinery on a machine without
# a GPU (both sides then run on the CPU).

CUDA_LEG_DEVICE = os.environ.get("KILN_TEST_CUDA_LEG_DEVICE", "cuda")


class NoGrad:
    """Wraps a floating numpy input of check_on_cuda that must not require grad."""

    def __init__(self, array):
        self.array = array


def _leg_args(inputs, device, grad):
    """numpy arrays -> kiln tensors on device (floating ones require grad when grad);
    lists/tuples of arrays -> lists of tensors; anything else passes through."""
    args, leaves = [], []
    for a in inputs:
        if isinstance(a, NoGrad):
            args.append(kiln.tensor(np.asarray(a.array)).to(device))
        elif isinstance(a, np.ndarray):
            x = kiln.tensor(a).to(device)
            if grad and a.dtype.kind == "f":
                x.requires_grad_()
                leaves.append(x)
            args.append(x)
        elif isinstance(a, list) and a and all(isinstance(e, np.ndarray) for e in a):
            sub, sub_leaves = _leg_args(a, device, grad)
            args.append(sub)
            leaves.extend(sub_leaves)
        else:
            args.append(a)
    return args, leaves


def _leg_outputs(result):
    if isinstance(result, (tuple, list)):
        return [o for r in result for o in _leg_outputs(r)]
    return [result]


def _leg_same(device, got, want, rtol, atol, what):
    if not isinstance(want, kiln.Tensor):
        assert not isinstance(got, kiln.Tensor), f"{what}: a tensor, expected {want!r}"
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                                   rtol=rtol, atol=atol, err_msg=what)
        return
    assert isinstance(got, kiln.Tensor), f"{what}: {type(got)}, expected a tensor"
    assert got.device.type == device, f"{what}: on {got.device}, expected {device}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype} on the CPU"
    assert tuple(got.shape) == tuple(want.shape), \
        f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)} on the CPU"
    g, w = to_np(got), to_np(want)
    if g.dtype == np.bool_ or np.issubdtype(g.dtype, np.integer):
        np.testing.assert_array_equal(g, w, err_msg=what)
    else:
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=atol, err_msg=what)


def _upstream(shape, dtype):
    """A fixed, non-constant upstream gradient (the same on both devices)."""
    n = int(np.prod(shape)) if shape else 1
    values = np.cos(np.arange(n) * 0.7 + 0.3).reshape(shape)
    return kiln.tensor(values).to(dtype)


def check_on_cuda(device, fn, *inputs, rtol=1e-5, atol=1e-5, grad=False, grad_rtol=None,
                  grad_atol=None):
    """Runs fn on kiln CPU tensors and on `device` tensors made from the same numpy inputs
    (a list of arrays becomes a list of tensors; NoGrad(array) never requires grad; other
    arguments pass through) and checks every output: device, dtype, shape, values (integer
    and bool outputs exactly). With grad, floating inputs require grad, the same upstream
    gradient is backpropagated through every floating output on both sides, and the input
    gradients are compared (tolerances grad_rtol/grad_atol, default rtol/atol).
    Returns the device outputs."""
    cpu_args, cpu_leaves = _leg_args(inputs, "cpu", grad)
    dev_args, dev_leaves = _leg_args(inputs, device, grad)
    want = _leg_outputs(fn(*cpu_args))
    got = _leg_outputs(fn(*dev_args))
    assert len(got) == len(want), f"{len(got)} outputs on {device}, {len(want)} on the CPU"
    for i, (g, w) in enumerate(zip(got, want)):
        _leg_same(device, g, w, rtol, atol, f"output {i}")
    if not grad:
        return got
    pairs = [(w, g) for w, g in zip(want, got)
             if isinstance(w, kiln.Tensor) and w.requires_grad]
    assert pairs, "grad=True but no output requires grad"
    ups = [_upstream(tuple(w.shape), w.dtype) for w, _ in pairs]
    kiln.autograd.backward([w for w, _ in pairs], ups)
    kiln.autograd.backward([g for _, g in pairs], [u.to(device) for u in ups])
    grad_rtol = rtol if grad_rtol is None else grad_rtol
    grad_atol = atol if grad_atol is None else grad_atol
    for i, (dl, cl) in enumerate(zip(dev_leaves, cpu_leaves)):
        if cl.grad is None:
            assert dl.grad is None, f"input {i}: a gradient on {device}, none on the CPU"
            continue
        assert dl.grad is not None, f"input {i}: no gradient on {device}"
        _leg_same(device, dl.grad, cl.grad, grad_rtol, grad_atol, f"gradient of input {i}")
    return got


def check_module_on_cuda(device, make, *inputs, rtol=1e-4, atol=1e-4, grad=True):
    """An nn module on `device` against the same module on the CPU: make() is called
    twice after kiln.manual_seed(0) (the same parameters), the second one moved to the
    device; check_on_cuda compares the outputs and input gradients, then the parameters'
    gradients are compared. Returns the (cpu, device) modules."""
    kiln.manual_seed(0)
    cpu_module = make()
    kiln.manual_seed(0)
    dev_module = make().to(device)
    modules = iter([cpu_module, dev_module])  # check_on_cuda runs the CPU side first
    check_on_cuda(device, lambda *xs: next(modules)(*xs), *inputs, rtol=rtol, atol=atol,
                  grad=grad)
    cpu_params = dict(cpu_module.named_parameters())
    for name, p in dev_module.named_parameters():
        assert p.device.type == device, f"parameter {name} on {p.device}"
        want = cpu_params[name]
        _leg_same(device, p, want, rtol, atol, f"parameter {name}")
        if grad and want.grad is not None:
            assert p.grad is not None, f"parameter {name}: no gradient on {device}"
            _leg_same(device, p.grad, want.grad, rtol, atol, f"gradient of parameter {name}")
    return cpu_module, dev_module


def check_optimizer_on_cuda(device, make_opt, *params, steps=4, rtol=1e-5, atol=1e-6):
    """make_opt(list of parameters) on `device` against the same on the CPU: parameters
    from the numpy arrays params, `steps` steps on the loss sum((p * c - 0.5)^2) (the
    same c on both devices), parameters compared after every step."""
    sides = {}
    for dev in ("cpu", device):
        ps = [kiln.tensor(a).to(dev).requires_grad_() for a in params]
        cs = [_upstream(tuple(p.shape), p.dtype).to(dev) for p in ps]
        sides[dev] = (ps, cs, make_opt(ps))
    for step in range(steps):
        for dev, (ps, cs, opt) in sides.items():
            opt.zero_grad()
            loss = sum(((p * c - 0.5) ** 2).sum() for p, c in zip(ps, cs))
            loss.backward()
            opt.step()
        for i, (got, want) in enumerate(zip(sides[device][0], sides["cpu"][0])):
            _leg_same(device, got.detach(), want.detach(), rtol, atol,
                      f"parameter {i} after step {step + 1}")


def lstm_tbptt_losses(device="cpu", steps=12):
    """The losses of a plain truncated-BPTT training loop (a 2-layer nn.LSTM and a linear
    head, the state detached between batches, SGD) on `device`, traced as kiln runs it by
    default; with kiln.set_tracing(False) around it, eager."""
    kiln.manual_seed(3)
    m = kiln.nn.LSTM(5, 16, num_layers=2).to(device)
    head = kiln.nn.Linear(16, 1).to(device)
    opt = kiln.optim.SGD(list(m.parameters()) + list(head.parameters()), lr=0.1)
    data = np.random.default_rng(7).standard_normal((steps, 9, 4, 5)).astype(np.float32)
    state, losses = None, []
    for step in range(steps):
        out, state = m(kiln.from_numpy(data[step]).to(device), state)
        state = tuple(s.detach() for s in state)
        loss = (head(out) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def traced_and_eager(run):
    """run() traced (kiln's default), then again with tracing off."""
    traced = run()
    kiln.set_tracing(False)
    try:
        eager = run()
    finally:
        kiln.set_tracing(True)
    return traced, eager
