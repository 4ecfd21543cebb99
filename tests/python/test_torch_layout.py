"""PyTorch's module layout and training-script furniture: every submodule a script
imports at its top exists; kiln.distributed / nn.parallel refuse clearly; autocast
(CPU bfloat16, against torch.autocast: dtypes, values, gradients) and its no-op cases;
GradScaler (pass-through when disabled or without CUDA, as torch's; the scaling rule
when enabled); backends flags; seeding, Generator, randint, randperm; default dtype;
inference_mode; kiln.cuda's queries without a GPU; clip_grad_norm_ / clip_grad_value_."""

import importlib
import warnings

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, to_np, torch


@pytest.mark.parametrize("name", [
    "kiln.nn", "kiln.nn.functional", "kiln.nn.init", "kiln.nn.parallel", "kiln.nn.utils",
    "kiln.nn.modules", "kiln.optim", "kiln.distributed", "kiln.amp", "kiln.cuda",
    "kiln.cuda.amp", "kiln.cpu.amp", "kiln.backends", "kiln.backends.cuda",
    "kiln.backends.cudnn", "kiln.utils", "kiln.utils.data", "kiln.utils.checkpoint",
    "kiln.autograd"])
def test_submodule_imports(name):
    importlib.import_module(name)


def test_script_header_imports():
    from kiln.distributed import destroy_process_group, init_process_group  # noqa: F401
    from kiln.nn import functional as F  # noqa: F401
    from kiln.nn.parallel import DistributedDataParallel as DDP  # noqa: F401
    from kiln.utils.data import DataLoader, Dataset, TensorDataset  # noqa: F401
    from kiln.cuda.amp import GradScaler, autocast  # noqa: F401


def test_distributed_layout_and_errors_before_init():
    """torch.distributed's names are there (tests/python/test_distributed.py tests them);
    before init_process_group they raise RuntimeError naming it; DataParallel over several
    devices points at DistributedDataParallel."""
    import kiln.distributed as dist
    from kiln.nn.parallel import DataParallel, DistributedDataParallel  # noqa: F401
    from kiln.utils.data.distributed import DistributedSampler  # noqa: F401

    assert dist.is_available() is True
    assert dist.is_initialized() is False
    with pytest.raises(RuntimeError, match="init_process_group"):
        dist.get_rank()
    with pytest.raises(NotImplementedError, match="DistributedDataParallel"):
        kiln.nn.parallel.DataParallel(kiln.nn.Linear(2, 2), device_ids=[0, 1])


# ---- autocast

@requires_torch
def test_cpu_autocast_matches_torch(rng):
    x = rng.standard_normal((6, 8)).astype(np.float32)
    w1 = rng.standard_normal((5, 8)).astype(np.float32)
    w2 = rng.standard_normal((5, 3)).astype(np.float32)
    img = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    cw = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    target = rng.integers(0, 3, 6)
    kx, kw1, kw2 = (k(a).requires_grad_(True) for a in (x, w1, w2))
    tx, tw1, tw2 = (t(a).requires_grad_(True) for a in (x, w1, w2))
    results = []
    for lib, F, xx, ww1, ww2, cast in ((kiln, kiln.nn.functional, kx, kw1, kw2, k),
                                       (torch, torch.nn.functional, tx, tw1, tw2, t)):
        with lib.autocast("cpu", dtype=lib.bfloat16):
            h = F.linear(xx, ww1)
            logits = h @ ww2
            conv = F.conv2d(cast(img), cast(cw))
            loss = F.cross_entropy(logits, cast(target))
            mse = F.mse_loss(logits, cast(np.zeros((6, 3), np.float32)))
        results.append((h, logits, conv, loss, mse))
        (loss + mse).backward()
    for a, b in zip(*results):
        assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
    for a, b in zip(results[0][:3], results[1][:3]):
        # one bf16 rounding apart at most per element, which the next op can magnify:
        # compare as a whole
        va, vb = to_np(a).astype(np.float64), to_np(b).astype(np.float64)
        assert np.linalg.norm(va - vb) <= 2e-2 * np.linalg.norm(vb) + 1e-6
    # The losses run in float32 on each framework's own bf16 logits: one bf16 rounding of
    # a logit (2^-8 of it, up to ~0.03 here) moves a loss of ~0.1 by a few percent, so each
    # loss is checked against float64 from its own logits, not against the other's.
    for _, logits, _, loss, mse in results:
        z = to_np(logits).astype(np.float64)
        lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
        ce = np.mean(lse - z[np.arange(6), target])
        np.testing.assert_allclose(to_np(loss).astype(np.float64), ce, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(to_np(mse).astype(np.float64), np.mean(z * z), rtol=1e-5)
    for a, b in ((kx, tx), (kw1, tw1), (kw2, tw2)):
        assert a.grad.dtype == kiln.float32
        # bf16 products round differently element by element: compare as a whole
        ga, gb = to_np(a.grad), to_np(b.grad)
        assert np.linalg.norm(ga - gb) <= 2e-2 * np.linalg.norm(gb)
    assert not kiln.is_autocast_enabled("cpu")


def test_autocast_disabled_or_float32_is_a_no_op(rng):
    x = k(rng.standard_normal((3, 4)).astype(np.float32))
    w = k(rng.standard_normal((2, 4)).astype(np.float32))
    plain = kiln.nn.functional.linear(x, w)
    with kiln.autocast("cpu", enabled=False):
        y = kiln.nn.functional.linear(x, w)
    assert y.dtype == kiln.float32
    np.testing.assert_array_equal(y.numpy(), plain.numpy())
    with pytest.warns(UserWarning, match="bfloat16"):
        ctx = kiln.autocast("cpu", dtype=kiln.float32)
    with ctx:
        assert not kiln.is_autocast_enabled("cpu")
        z = x @ w.t()
    np.testing.assert_array_equal(z.numpy(), plain.numpy())


def test_autocast_nests_restores_and_decorates():
    @kiln.cpu.amp.autocast()
    def inner(a, b):
        return a @ b

    a, b = kiln.randn(2, 3), kiln.randn(3, 2)
    assert inner(a, b).dtype == kiln.bfloat16
    with kiln.amp.autocast("cpu"):
        with kiln.autocast("cpu", enabled=False):
            assert (a @ b).dtype == kiln.float32
        assert (a @ b).dtype == kiln.bfloat16
    assert (a @ b).dtype == kiln.float32
    with pytest.raises(RuntimeError, match="device_type"):
        kiln.autocast("tpu")


# ---- GradScaler

@pytest.mark.parametrize("make", [lambda: kiln.cuda.amp.GradScaler(enabled=False),
                                  lambda: kiln.amp.GradScaler("cuda", enabled=False)])
def test_grad_scaler_disabled_is_a_pass_through(make, rng):
    scaler = make()
    m = kiln.nn.Linear(3, 1)
    opt = kiln.optim.SGD(m.parameters(), lr=0.1)
    before = m.weight.numpy().copy()
    loss = m(kiln.randn(4, 3)).sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    grad = m.weight.grad.numpy().copy()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    np.testing.assert_allclose(m.weight.numpy(), before - 0.1 * grad, rtol=1e-6)
    assert scaler.get_scale() == 1.0 and not scaler.is_enabled()
    assert scaler.state_dict() == {}


@requires_torch
def test_grad_scaler_without_cuda_disables_like_torch():
    if kiln.cuda.is_available():
        pytest.skip("a GPU is present: the scaler stays enabled")
    with warnings.catch_warnings(record=True) as wk:
        warnings.simplefilter("always")
        ks = kiln.cuda.amp.GradScaler()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        ts = torch.cuda.amp.GradScaler()
    assert ks.is_enabled() == ts.is_enabled() is False
    assert any("CUDA is not available" in str(w.message) for w in wk)
    assert ks.get_scale() == ts.get_scale()


def test_grad_scaler_enabled_scales_skips_and_backs_off():
    scaler = kiln.amp.GradScaler("cpu", init_scale=8.0, growth_interval=2)
    p = kiln.nn.Parameter(kiln.tensor([1.0, 2.0]))
    opt = kiln.optim.SGD([p], lr=1.0)
    loss = (p * kiln.tensor([3.0, 4.0])).sum()
    scaler.scale(loss).backward()
    np.testing.assert_allclose(p.grad.numpy(), [24.0, 32.0])
    scaler.step(opt)  # unscales, then steps
    np.testing.assert_allclose(p.numpy(), [-2.0, -2.0])
    scaler.update()
    assert scaler.get_scale() == 8.0
    p.grad = kiln.tensor([float("inf"), 1.0])
    scaler.step(opt)  # an overflow: the step is skipped and the scale backs off
    np.testing.assert_allclose(p.numpy(), [-2.0, -2.0])
    scaler.update()
    assert scaler.get_scale() == 4.0
    for _ in range(2):  # growth_interval clean steps: the scale grows
        p.grad = kiln.tensor([1.0, 1.0])
        scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() == 8.0
    state = scaler.state_dict()
    other = kiln.amp.GradScaler("cpu")
    other.load_state_dict(state)
    assert other.get_scale() == 8.0


# ---- switches, seeding, factories

def test_backends_flags_and_matmul_precision():
    kiln.backends.cuda.matmul.allow_tf32 = True
    kiln.backends.cudnn.allow_tf32 = True
    kiln.backends.cudnn.benchmark = True
    kiln.backends.cudnn.deterministic = False
    assert kiln.backends.cuda.matmul.allow_tf32 is True
    kiln.set_float32_matmul_precision("high")
    assert kiln.get_float32_matmul_precision() == "high"
    kiln.set_float32_matmul_precision("highest")
    with pytest.raises(RuntimeError, match="precision"):
        kiln.set_float32_matmul_precision("fast")


def test_manual_seed_generator_randint_randperm():
    g = kiln.manual_seed(123)
    assert isinstance(g, kiln.Generator) and kiln.initial_seed() == 123
    a = kiln.randint(3, 10, (2000,))
    kiln.manual_seed(123)
    b = kiln.randint(3, 10, (2000,))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert a.dtype == kiln.int64 and a.numpy().min() == 3 and a.numpy().max() == 9
    counts = np.bincount(a.numpy() - 3, minlength=7)
    assert counts.min() > 2000 / 7 * 0.7  # every value drawn, roughly uniformly
    assert tuple(kiln.randint(5, (2, 3)).shape) == (2, 3)
    g1, g2 = kiln.Generator().manual_seed(7), kiln.Generator().manual_seed(7)
    np.testing.assert_array_equal(kiln.randperm(50, generator=g1).numpy(),
                                  kiln.randperm(50, generator=g2).numpy())
    g1.manual_seed(3)
    g2.manual_seed(3)
    for fn in (kiln.rand, kiln.randn):
        a, b = fn(4, 5, generator=g1), fn((4, 5), generator=g2)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert a.dtype == kiln.float32 and tuple(a.shape) == (4, 5)
    assert 0 <= kiln.rand(100, generator=g1).numpy().min()
    p = kiln.randperm(100).numpy()
    np.testing.assert_array_equal(np.sort(p), np.arange(100))
    with pytest.raises(RuntimeError, match="randint"):
        kiln.randint(5, 5, (3,))
    with pytest.raises(TypeError):
        kiln.manual_seed("seed")


def test_set_default_dtype_changes_factories_and_layers():
    assert kiln.get_default_dtype() == kiln.float32
    try:
        kiln.set_default_dtype(kiln.float64)
        assert kiln.zeros(2).dtype == kiln.float64
        assert kiln.randn(2, 2).dtype == kiln.float64
        assert kiln.tensor([1.5]).dtype == kiln.float64
        assert kiln.arange(0.0, 1.0, 0.5).dtype == kiln.float64
        assert kiln.arange(3).dtype == kiln.int64
        assert kiln.nn.Linear(2, 2).weight.dtype == kiln.float64
    finally:
        kiln.set_default_dtype(kiln.float32)
    assert kiln.zeros(2).dtype == kiln.float32
    with pytest.raises(TypeError, match="floating"):
        kiln.set_default_dtype(kiln.int64)


def test_inference_mode():
    x = kiln.randn(3, requires_grad=True)
    with kiln.inference_mode():
        assert not (x * 2).requires_grad
    with kiln.inference_mode(False):
        assert (x * 2).requires_grad

    @kiln.inference_mode()
    def f(v):
        return v * 2

    assert not f(x).requires_grad


def test_cuda_queries_without_a_gpu():
    if kiln.cuda.is_available():
        pytest.skip("a GPU is present")
    assert kiln.cuda.is_bf16_supported() is False
    assert kiln.cuda.max_memory_allocated() == 0
    kiln.cuda.manual_seed(3)
    kiln.cuda.manual_seed_all(3)
    kiln.cuda.empty_cache()
    with pytest.raises(RuntimeError, match="set_device"):
        kiln.cuda.set_device(0)
    start, end = kiln.cuda.Event(enable_timing=True), kiln.cuda.Event(enable_timing=True)
    start.record()
    kiln.randn(64, 64) @ kiln.randn(64, 64)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0
    with pytest.raises(RuntimeError, match="enable_timing"):
        kiln.cuda.Event().elapsed_time(kiln.cuda.Event())


# ---- gradient clipping

@requires_torch
@pytest.mark.parametrize("norm_type,max_norm", [(2.0, 0.5), (1.0, 0.3), (float("inf"), 0.2),
                                                (3.0, 100.0)])
def test_clip_grad_norm_matches_torch(rng, norm_type, max_norm):
    shapes = [(3, 4), (4,), (2, 2, 2)]
    kp = [kiln.nn.Parameter(kiln.zeros(s, dtype=kiln.float64)) for s in shapes]
    tp = [torch.nn.Parameter(torch.zeros(s, dtype=torch.float64)) for s in shapes]
    for a, b, s in zip(kp, tp, shapes):
        g = rng.standard_normal(s)
        a.grad = k(g)
        b.grad = t(g)
    kn = kiln.nn.utils.clip_grad_norm_(kp, max_norm, norm_type)
    tn = torch.nn.utils.clip_grad_norm_(tp, max_norm, norm_type)
    assert_close(kn, tn, rtol=1e-12, atol=1e-12)
    for a, b in zip(kp, tp):
        assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)
    kiln.nn.utils.clip_grad_value_(kp, 0.1)
    torch.nn.utils.clip_grad_value_(tp, 0.1)
    for a, b in zip(kp, tp):
        assert_close(a.grad, b.grad)


@requires_torch
def test_parameters_vector_round_trip(rng):
    m = kiln.nn.Linear(3, 2)
    v = kiln.nn.utils.parameters_to_vector(m.parameters())
    assert tuple(v.shape) == (8,)
    new = rng.standard_normal(8).astype(np.float32)
    kiln.nn.utils.vector_to_parameters(k(new), m.parameters())
    np.testing.assert_array_equal(kiln.nn.utils.parameters_to_vector(m.parameters()).numpy(),
                                  new)


# ---- kiln.compile(module)

def test_compile_module_wraps_like_torch(rng):
    class Net(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = kiln.nn.Linear(4, 3)
            self.block_size = 7

        def forward(self, x):
            return kiln.relu(self.fc(x))

        def configure(self):
            return "configured"

    kiln.reset()
    net = Net()
    c = kiln.compile(net)
    assert c._orig_mod is net and isinstance(c, kiln.nn.Module)
    assert c.block_size == 7 and c.configure() == "configured" and c.fc is net.fc
    assert list(c.state_dict()) == ["_orig_mod.fc.weight", "_orig_mod.fc.bias"]
    assert [id(p) for p in c.parameters()] == [id(p) for p in net.parameters()]
    for _ in range(4):
        x = k(rng.standard_normal((5, 4)).astype(np.float32))
        np.testing.assert_allclose(c(x).numpy(), net(x).numpy(), rtol=1e-6)
    assert any(tr["replays"] > 0 for tr in kiln.explain().traces)
    other = kiln.compile(Net())
    other.load_state_dict(c.state_dict())
    np.testing.assert_array_equal(other.fc.weight.numpy(), net.fc.weight.numpy())
    c.eval()
    assert net.training is False
    kiln.reset()


@requires_torch
def test_data_parallel_on_one_device_wraps_like_torch(rng):
    """DataParallel with one device or none (the CPU) calls the module, with torch's
    'module.' state_dict prefix; more devices raise NotImplementedError."""
    km, tm = kiln.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    kd, td = kiln.nn.DataParallel(km, device_ids=[0] if kiln.cuda.is_available() else []), \
        torch.nn.DataParallel(tm, device_ids=[])
    assert list(kd.state_dict()) == list(td.state_dict()) == ["module.weight", "module.bias"]
    kd.load_state_dict(td.state_dict())
    x = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(kd(kiln.tensor(x)).detach().numpy(),
                               td(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert kd.module is km
    with pytest.raises(NotImplementedError, match="DataParallel over 2 devices"):
        kiln.nn.DataParallel(km, device_ids=[0, 1])


def test_cuda_streams_without_a_gpu_refuse_clearly():
    if kiln.cuda.is_available():
        s = kiln.cuda.Stream()
        with kiln.cuda.stream(s):
            y = kiln.ones(3, device="cuda") * 2
        s.synchronize()
        assert kiln.cuda.current_stream() == s and s.query()
        assert y.sum().item() == 6
    else:
        with pytest.raises(RuntimeError, match="Stream: no CUDA device"):
            kiln.cuda.Stream()
        with kiln.cuda.stream(None):  # a no-op context, as torch's with None
            pass
