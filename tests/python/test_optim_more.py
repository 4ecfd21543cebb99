"""kiln.optim's Adagrad, Adadelta, RMSprop, LBFGS, Adam/AdamW options, optimizer
state_dict / load_state_dict (both ways with torch, mid-training) and
kiln.optim.lr_scheduler against torch 1.13: parameters after every step on copied
weights (eager and traced), learning-rate sequences, scheduler checkpoints, PyTorch's
error types for bad arguments."""

import math

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, to_np, torch

pytestmark = requires_torch

TOL = dict(rtol=1e-9, atol=1e-11)  # float64 throughout
F32 = dict(rtol=2e-5, atol=2e-5)


@pytest.fixture(params=["eager", "traced"])
def mode(request):
    kiln.reset()
    was = kiln.is_tracing()
    kiln.set_tracing(request.param == "traced")
    yield request.param
    kiln.set_tracing(was)
    kiln.reset()


def make_models(dtype="float64", seed=0):
    kd, td = getattr(kiln, dtype), getattr(torch, dtype)
    kiln.manual_seed(seed)
    km = kiln.nn.Sequential(kiln.nn.Linear(5, 7, dtype=kd), kiln.nn.Tanh(),
                            kiln.nn.Linear(7, 2, dtype=kd))
    tm = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(),
                             torch.nn.Linear(7, 2)).to(td)
    tm.load_state_dict({n: torch.from_numpy(to_np(v)) for n, v in km.state_dict().items()})
    return km, tm


def data(rng, dtype="float64"):
    return (rng.standard_normal((12, 5)).astype(dtype), rng.standard_normal((12, 2)).astype(dtype))


def one_step(km, tm, kopt, topt, x, y):
    for m, opt, lib, conv in ((km, kopt, kiln, k), (tm, topt, torch, t)):
        opt.zero_grad()
        loss = lib.nn.functional.mse_loss(m(conv(x)), conv(y))
        loss.backward()
        opt.step()


def compare_params(km, tm, tol=TOL, where=""):
    for (name, kp), tp in zip(km.named_parameters(), tm.parameters()):
        try:
            assert_close(kp, tp.detach(), **tol)
        except AssertionError as e:
            raise AssertionError(f"{where} {name}: {e}") from None


CASES = [
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.01, initial_accumulator_value=0.2)),
    ("Adagrad", dict(lr=0.05, eps=1e-6, maximize=True)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.02)),
    ("Adadelta", dict(lr=0.3, maximize=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.9)),
    ("RMSprop", dict(lr=0.01, centered=True, weight_decay=0.05)),
    ("RMSprop", dict(lr=0.005, momentum=0.5, centered=True, alpha=0.9, maximize=True)),
    ("Adam", dict(lr=0.01, amsgrad=True, foreach=False)),
    ("AdamW", dict(lr=0.01, amsgrad=True, weight_decay=0.1, foreach=True)),
    ("SGD", dict(lr=0.05, momentum=0.9, foreach=False)),
]


@pytest.mark.parametrize("name,kwargs", CASES)
def test_optimizer_matches_torch(mode, rng, name, kwargs):
    km, tm = make_models()
    kopt = getattr(kiln.optim, name)(km.parameters(), **kwargs)
    topt = getattr(torch.optim, name)(tm.parameters(), **kwargs)
    x, y = data(rng)
    for step in range(8):
        one_step(km, tm, kopt, topt, x, y)
        compare_params(km, tm, where=f"step {step}")


def test_optimizer_float32(rng):
    km, tm = make_models("float32")
    kopt = kiln.optim.RMSprop(km.parameters(), lr=0.01, momentum=0.9, centered=True)
    topt = torch.optim.RMSprop(tm.parameters(), lr=0.01, momentum=0.9, centered=True)
    x, y = data(rng, "float32")
    for _ in range(5):
        one_step(km, tm, kopt, topt, x, y)
    compare_params(km, tm, F32)


def _state_to_torch(sd):
    conv = {}
    for i, st in sd["state"].items():
        conv[i] = {n: torch.from_numpy(to_np(v)) if isinstance(v, kiln.Tensor) else v
                   for n, v in st.items()}
    return {"state": conv, "param_groups": [dict(g) for g in sd["param_groups"]]}


@pytest.mark.parametrize("name,kwargs", [
    ("SGD", dict(lr=0.05, momentum=0.9)), ("Adam", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, amsgrad=True)), ("Adagrad", dict(lr=0.1)),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True)), ("Adadelta", dict(lr=0.5))])
def test_optimizer_state_dict_round_trips_with_torch(rng, name, kwargs):
    km, tm = make_models()
    kopt = getattr(kiln.optim, name)(km.parameters(), **kwargs)
    topt = getattr(torch.optim, name)(tm.parameters(), **kwargs)
    x, y = data(rng)
    for _ in range(3):
        one_step(km, tm, kopt, topt, x, y)
    ksd, tsd = kopt.state_dict(), topt.state_dict()
    assert sorted(ksd["state"]) == sorted(tsd["state"])
    for i in tsd["state"]:
        assert sorted(ksd["state"][i]) == sorted(tsd["state"][i])
        for n, v in tsd["state"][i].items():
            assert_close(ksd["state"][i][n], v, check_dtype=n != "step", **TOL)
    # kiln's checkpoint into a fresh torch optimizer, torch's into a fresh kiln one
    km2, tm2 = make_models(seed=1)
    km2.load_state_dict(km.state_dict())
    tm2.load_state_dict(tm.state_dict())
    kopt2 = getattr(kiln.optim, name)(km2.parameters(), **kwargs)
    topt2 = getattr(torch.optim, name)(tm2.parameters(), **kwargs)
    kopt2.load_state_dict(tsd)
    topt2.load_state_dict(_state_to_torch(ksd))
    for step in range(3):
        one_step(km2, tm2, kopt2, topt2, x, y)
        one_step(km, tm, kopt, topt, x, y)
        compare_params(km2, tm2, where=f"resumed step {step}")
        compare_params(km2, km, where=f"resumed vs uninterrupted {step}")


def test_load_state_dict_checks_groups():
    km, _ = make_models()
    opt = kiln.optim.Adam(km.parameters())
    sd = opt.state_dict()
    with pytest.raises(ValueError, match="parameter groups"):
        opt.load_state_dict({"state": {}, "param_groups": sd["param_groups"] * 2})
    bad = dict(sd["param_groups"][0], params=[0])
    with pytest.raises(ValueError, match="size"):
        opt.load_state_dict({"state": {}, "param_groups": [bad]})


# ---- schedulers

def _sched_pair(name, kwargs, opt_name="SGD", opt_kwargs=None):
    opt_kwargs = opt_kwargs or dict(lr=0.1, momentum=0.9)
    km, tm = make_models()
    kopt = getattr(kiln.optim, opt_name)(km.parameters(), **opt_kwargs)
    topt = getattr(torch.optim, opt_name)(tm.parameters(), **opt_kwargs)
    ks = getattr(kiln.optim.lr_scheduler, name)(kopt, **kwargs)
    ts = getattr(torch.optim.lr_scheduler, name)(topt, **kwargs)
    return km, tm, kopt, topt, ks, ts




SCHEDULES = [
    ("StepLR", dict(step_size=3, gamma=0.5)),
    ("MultiStepLR", dict(milestones=[2, 5, 5, 9], gamma=0.3)),
    ("ExponentialLR", dict(gamma=0.9)),
    ("CosineAnnealingLR", dict(T_max=6, eta_min=0.001)),
    ("LambdaLR", dict(lr_lambda=lambda e: 1.0 / (e + 1))),
    ("MultiplicativeLR", dict(lr_lambda=lambda e: 0.95)),
    ("LinearLR", dict(start_factor=0.25, total_iters=4)),
    ("ConstantLR", dict(factor=0.5, total_iters=3)),
    ("OneCycleLR", dict(max_lr=0.5, total_steps=20)),
    ("OneCycleLR", dict(max_lr=[0.3], epochs=4, steps_per_epoch=5, anneal_strategy="linear",
                        three_phase=True, pct_start=0.25)),
    ("CosineAnnealingWarmRestarts", dict(T_0=3, T_mult=2, eta_min=0.01)),
    ("CosineAnnealingWarmRestarts", dict(T_0=4)),
    ("CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=3, mode="triangular2")),
    ("CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=2, step_size_down=4,
                      mode="exp_range", gamma=0.9)),
    ("CyclicLR", dict(base_lr=0.02, max_lr=0.2, step_size_up=3, cycle_momentum=False,
                      scale_fn=lambda x: 0.5 ** x, scale_mode="iterations")),
    ("PolynomialLR", dict(total_iters=8, power=2.0)),
]


@pytest.mark.parametrize("name,kwargs", SCHEDULES)
def test_scheduler_lrs_and_training_match_torch(rng, name, kwargs):
    km, tm, kopt, topt, ks, ts = _sched_pair(name, kwargs)
    x, y = data(rng)
    assert ks.get_last_lr() == ts.get_last_lr()
    for step in range(19):
        one_step(km, tm, kopt, topt, x, y)
        ks.step()
        ts.step()
        np.testing.assert_allclose(ks.get_last_lr(), ts.get_last_lr(), rtol=1e-14, atol=1e-16)
        assert kopt.param_groups[0]["momentum"] == pytest.approx(topt.param_groups[0]["momentum"])
    compare_params(km, tm)


def test_one_cycle_cycles_adam_betas_like_torch(rng):
    km, tm, kopt, topt, ks, ts = _sched_pair("OneCycleLR", dict(max_lr=0.05, total_steps=12),
                                             "Adam", dict(lr=0.01))
    x, y = data(rng)
    for step in range(11):
        one_step(km, tm, kopt, topt, x, y)
        ks.step()
        ts.step()
        assert kopt.param_groups[0]["betas"] == pytest.approx(topt.param_groups[0]["betas"])
        compare_params(km, tm, where=f"step {step}")


def test_sequential_lr_matches_torch():
    def build(lib):
        opt = lib.optim.SGD([lib.zeros(2, requires_grad=True)], lr=1.0)
        sch = lib.optim.lr_scheduler
        warm = sch.LinearLR(opt, start_factor=0.1, total_iters=3)
        cos = sch.CosineAnnealingLR(opt, T_max=5)
        return opt, sch.SequentialLR(opt, [warm, cos], milestones=[3])

    (ko, ks), (to, ts) = build(kiln), build(torch)
    with pytest.warns(UserWarning):
        for _ in range(10):
            ko.step()
            to.step()
            ks.step()
            ts.step()
            np.testing.assert_allclose(ks.get_last_lr(), ts.get_last_lr(), rtol=1e-14)


def test_chained_and_warm_restarts_with_epochs_match_torch():
    def build(lib):
        opt = lib.optim.SGD([lib.zeros(2, requires_grad=True)], lr=1.0)
        sch = lib.optim.lr_scheduler
        chained = sch.ChainedScheduler([sch.ConstantLR(opt, factor=0.1, total_iters=2),
                                        sch.ExponentialLR(opt, gamma=0.9)])
        opt2 = lib.optim.SGD([lib.zeros(2, requires_grad=True)], lr=0.5)
        sgdr = sch.CosineAnnealingWarmRestarts(opt2, T_0=2, T_mult=3, eta_min=0.05)
        return opt, chained, opt2, sgdr

    (ko, kc, _, kw), (to, tc, _, tw) = build(kiln), build(torch)
    for i in range(12):
        ko.step()
        to.step()
        kc.step()
        tc.step()
        np.testing.assert_allclose(kc.get_last_lr(), tc.get_last_lr(), rtol=1e-14)
        kw.step(i * 0.7)  # fractional epochs, as scripts that step per batch do
        tw.step(i * 0.7)
        np.testing.assert_allclose(kw.get_last_lr(), tw.get_last_lr(), rtol=1e-14)
    kc2 = build(kiln)[1]
    kc2.load_state_dict(kc.state_dict())
    assert kc2._schedulers[1].last_epoch == kc._schedulers[1].last_epoch == 12


def test_reduce_on_plateau_matches_torch():
    losses = [1.0, 0.9, 0.9, 0.91, 0.95, 0.9, 0.89, 0.9, 0.9, 0.9, 0.9, 0.7, 0.7, 0.7, 0.7]

    def build(lib):
        opt = lib.optim.SGD([lib.zeros(2, requires_grad=True)], lr=1.0)
        return opt, lib.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=2, factor=0.5,
                                                             cooldown=1, min_lr=0.1)

    (ko, ks), (to, ts) = build(kiln), build(torch)
    for v in losses:
        ks.step(kiln.tensor(v))
        ts.step(v)
        assert ko.param_groups[0]["lr"] == to.param_groups[0]["lr"]
    state = ts.state_dict()
    ko2, ks2 = build(kiln)
    ks2.load_state_dict(state)
    assert ks2.best == ts.best and ks2.num_bad_epochs == ts.num_bad_epochs


@pytest.mark.filterwarnings("ignore:Detected call of")
def test_scheduler_state_dict_resumes_like_torch():
    def build(lib):
        opt = lib.optim.SGD([lib.zeros(2, requires_grad=True)], lr=0.2)
        return opt, lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=7)

    (ko, ks), (to, ts) = build(kiln), build(torch)
    for _ in range(4):
        ts.step()
    ks.load_state_dict(ts.state_dict())
    ko.param_groups[0]["lr"] = to.param_groups[0]["lr"]
    for _ in range(6):
        ks.step()
        ts.step()
        assert ks.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-14)
    assert sorted(ks.state_dict()) == sorted(ts.state_dict())


@pytest.mark.parametrize("build", [
    lambda lib, p: lib.optim.lr_scheduler.StepLR("not an optimizer", 3),
    lambda lib, p: lib.optim.lr_scheduler.LinearLR(lib.optim.SGD(p, lr=1), start_factor=-1),
    lambda lib, p: lib.optim.lr_scheduler.OneCycleLR(lib.optim.SGD(p, lr=1), max_lr=1),
    lambda lib, p: lib.optim.lr_scheduler.ReduceLROnPlateau(lib.optim.SGD(p, lr=1), factor=2),
    lambda lib, p: lib.optim.lr_scheduler.ReduceLROnPlateau(lib.optim.SGD(p, lr=1), mode="up"),
    lambda lib, p: lib.optim.Adagrad(p, lr_decay=-1),
    lambda lib, p: lib.optim.RMSprop(p, alpha=-0.5),
    lambda lib, p: lib.optim.Adadelta(p, rho=2.0),
    lambda lib, p: lib.optim.Adam(p, betas=(1.0, 0.9)),
    lambda lib, p: lib.optim.LBFGS([{"params": p[:1]}, {"params": p[1:]}]),
    lambda lib, p: lib.optim.SGD([{"params": p[:1]}, {"params": p[:1]}], lr=0.1),
])
def test_errors_match_torch_types(build):
    with pytest.raises(Exception) as et:
        build(torch, [torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)])
    with pytest.raises(et.type):
        build(kiln, [kiln.zeros(2, requires_grad=True), kiln.zeros(3, requires_grad=True)])


# ---- LBFGS

@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
def test_lbfgs_matches_torch(rng, line_search):
    km, tm = make_models()
    kw = dict(lr=0.5 if line_search is None else 1.0, max_iter=6, history_size=4,
              line_search_fn=line_search)
    kopt, topt = kiln.optim.LBFGS(km.parameters(), **kw), torch.optim.LBFGS(tm.parameters(), **kw)
    x, y = data(rng)
    losses = []
    for _ in range(3):
        for m, opt, lib, conv in ((km, kopt, kiln, k), (tm, topt, torch, t)):
            def closure(m=m, opt=opt, lib=lib, conv=conv):
                opt.zero_grad()
                loss = lib.nn.functional.mse_loss(m(conv(x)), conv(y))
                loss.backward()
                return loss

            losses.append(float(opt.step(closure)))
        compare_params(km, tm, dict(rtol=1e-7, atol=1e-9))
    assert losses[-1] < losses[0]
    ks, ts = kopt.state[next(iter(km.parameters()))], topt.state[next(iter(tm.parameters()))]
    assert ks["func_evals"] == ts["func_evals"] and ks["n_iter"] == ts["n_iter"]
    with pytest.raises(RuntimeError, match="closure"):
        kopt.step()


def test_lbfgs_minimizes_rosenbrock():
    p = kiln.tensor([-1.5, 2.0], dtype=kiln.float64, requires_grad=True)
    opt = kiln.optim.LBFGS([p], lr=1, max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = (1 - p[0]) ** 2 + 100 * (p[1] - p[0] ** 2) ** 2
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)
    np.testing.assert_allclose(p.detach().numpy(), [1.0, 1.0], atol=1e-5)
    assert math.isfinite(float(closure()))
