"""Background compiles (tracer/background_compile.h) from Python: a training loop keeps
running eagerly while its hot trace compiles on the compile thread, the plan swaps in at
a later iteration, and every loss equals PyTorch's (CPU, float32) before, during and after
the swap; synchronize_compiles() makes the swap deterministic; a process that exits with
a compile in flight exits cleanly."""

import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest
torch = pytest.importorskip("torch")

import kiln

pytestmark = pytest.mark.usefixtures("fresh_tracer")


@pytest.fixture
def background():
    previous = kiln.set_config(background_compile=True)
    yield
    kiln.synchronize_compiles()
    kiln.set_config(**previous)


def make_mlp(fw, arrays):
    model = fw.nn.Sequential(fw.nn.Linear(12, 32), fw.nn.Tanh(), fw.nn.Linear(32, 3))
    with fw.no_grad():
        for p, a in zip(model.parameters(), arrays):
            p.copy_(fw.from_numpy(a.copy()))
    return model, fw.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train_step(fw, model, opt, x, y):
    opt.zero_grad()
    loss = fw.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def test_losses_equal_torch_while_compiling_and_after_the_swap(rng, background, capfd):
    shapes = [(32, 12), (32,), (3, 32), (3,)]
    arrays = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in shapes]
    xs = rng.standard_normal((12, 16, 12)).astype(np.float32)
    ys = rng.standard_normal((12, 16, 3)).astype(np.float32)
    km, kopt = make_mlp(kiln, arrays)
    tm, topt = make_mlp(torch, arrays)
    replays, seen_in_flight, steps = [], False, 0
    kiln.set_config(logs="trace")  # the install's log line says where the compile ran
    for i in range(400):
        b = i % len(xs)
        kl = train_step(kiln, km, kopt, kiln.from_numpy(xs[b]), kiln.from_numpy(ys[b]))
        seen_in_flight |= kiln._C._compiles_in_flight() > 0
        tl = train_step(torch, tm, topt, torch.from_numpy(xs[b]), torch.from_numpy(ys[b]))
        assert kl == pytest.approx(tl, rel=2e-4, abs=1e-6), f"step {i}"
        replays.append(sum(t["replays"] for t in kiln.explain().traces))
        steps = i + 1
        if replays[-1] >= 5 and kiln._C._compiles_in_flight() == 0 and i >= 20:
            break
    kiln.set_config(logs=0)
    # Sampled between steps, a compile in flight is seen unless it is quicker than a step
    # on a busy machine; the log line of its install says where it ran in any case.
    assert seen_in_flight or ", in the background) at " in capfd.readouterr().err, \
        "no compile ran in the background"
    assert replays[-1] >= 5, kiln.explain().table()
    for p, q in zip(km.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=2e-4, atol=1e-5)
    assert steps < 400


def test_synchronize_compiles_swaps_the_plan_in(rng, background):
    x = kiln.from_numpy(rng.standard_normal((64, 33)).astype(np.float32))
    w = kiln.from_numpy(rng.standard_normal((33,)).astype(np.float32))

    def body():
        with kiln.region():  # one trace of 80 ops (no loop closes inside a region)
            y = x
            for _ in range(20):
                y = kiln.tanh(y * w + 0.5) - x * 0.25
        return y

    ref = torch.from_numpy(x.numpy())
    tw = torch.from_numpy(w.numpy())
    for _ in range(20):
        ref = torch.tanh(ref * tw + 0.5) - torch.from_numpy(x.numpy()) * 0.25
    for i in range(6):
        y = body()
        # 20 chained tanh: fused (vector math) and eager rounding compound
        np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
        if i == 1:
            kiln.synchronize_compiles()
    traces = kiln.explain().traces
    assert len(traces) == 1 and traces[0]["replays"] == 4, kiln.explain().table()
    assert kiln.set_config(background_compile=True)["background_compile"] is True


def test_process_exit_with_a_compile_in_flight_is_clean():
    script = textwrap.dedent("""
        import kiln
        x = kiln.rand(64, 65)
        def body():
            with kiln.region():  # one trace of 360 ops
                y = x
                for _ in range(120):
                    y = kiln.tanh(y * 1.5 + 0.5) - x
            return y
        for _ in range(2):
            body()
        print("in flight", kiln._C._compiles_in_flight(), flush=True)
    """)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, KILN_CACHE_DIR=cache)
        env.pop("KILN_COMPILE_SYNC", None)
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "in flight 1" in p.stdout, p.stdout + p.stderr
    assert "Sanitizer" not in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_forked_child_compiles_its_own_traces(rng, background):
    xn = rng.standard_normal((64, 33)).astype(np.float32)
    x = kiln.from_numpy(xn)

    def body():
        with kiln.region():
            y = x
            for _ in range(10):
                y = kiln.tanh(y * 1.5 + 0.5) - x
        return y

    ref = torch.from_numpy(xn)
    for _ in range(10):
        ref = torch.tanh(ref * 1.5 + 0.5) - torch.from_numpy(xn)
    for _ in range(2):
        body()  # hot: its compile is queued or running when the process forks
    pid = os.fork()
    if pid == 0:  # the child: no compile thread of its own yet, the parent's job never runs
        code = 1
        try:
            for i in range(6):
                np.testing.assert_allclose(body().numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
                if i >= 1:
                    kiln.synchronize_compiles()
            traces = kiln.explain().traces
            # Known, open: about 1 run in 12 the child ends with the parent's compiled trace
            # installed but never replayed beside its own compile of the same path (2
            # traces; the second replays). Results stay right; the extra compile is waste.
            replays = max((t["replays"] for t in traces), default=0)
            code = 0 if 1 <= len(traces) <= 2 and replays >= 3 else 2
            if code:
                print("child:", kiln.explain().table(), file=sys.stderr, flush=True)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    kiln.synchronize_compiles()
    np.testing.assert_allclose(body().numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
