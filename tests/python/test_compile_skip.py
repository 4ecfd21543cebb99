"""kiln.compile(fn, skip=True) (kiln/_skip.py, docs/tracer.md "Skipping the function"):
after a verified break-free call, later calls launch the plan without running the body;
the footguns (side effects, globals read, module state, non-tensor arguments, graph
breaks, autograd, shapes) make it run the body instead. Every result is checked against
a float64 numpy reference computed from the same inputs and weights."""

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F

pytestmark = pytest.mark.usefixtures("fresh_tracer")

CALLS = 7


def f32(rng, *shape):
    return kiln.tensor(rng.standard_normal(shape).astype(np.float32))


def close(got, want):
    np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=1e-4, atol=1e-5)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 12)
        self.fc2 = nn.Linear(12, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def mlp_ref(m, x):
    w1, b1 = m.fc1.weight.numpy().astype(np.float64), m.fc1.bias.numpy().astype(np.float64)
    w2, b2 = m.fc2.weight.numpy().astype(np.float64), m.fc2.bias.numpy().astype(np.float64)
    h = np.maximum(x.numpy().astype(np.float64) @ w1.T + b1, 0)
    return h @ w2.T + b2


def skipping(compiled):
    return compiled._skipping if hasattr(compiled, "_skipping") else compiled


def test_module_skips_after_verification_with_right_values(rng):
    m = MLP()
    cm = kiln.compile(m, skip=True)
    with kiln.no_grad():
        for i in range(CALLS):
            x = f32(rng, 4, 6)  # new values every call: the plan reads them
            close(cm(x), mlp_ref(m, x))
    # warmup 2 calls, then a compiled replay bound twice (verified), then skips
    assert skipping(cm).skipped_calls == CALLS - 4
    assert skipping(cm).why_not_skipped == ""


def test_parameter_replaced_or_written_in_place(rng):
    m = MLP()
    cm = kiln.compile(m, skip=True)
    x = f32(rng, 4, 6)
    with kiln.no_grad():
        for _ in range(CALLS):
            cm(x)
        skipped = skipping(cm).skipped_calls
        assert skipped > 0
        m.fc1.weight = nn.Parameter(f32(rng, 12, 6))  # a new parameter object
        close(cm(x), mlp_ref(m, x))
        assert skipping(cm).skipped_calls == skipped  # that call ran the body
        for _ in range(CALLS):
            close(cm(x), mlp_ref(m, x))
        m.fc2.bias.mul_(3.0)  # the same parameter, new values: skipping reads them
        for _ in range(3):
            close(cm(x), mlp_ref(m, x))


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x):
        y = self.fc(x)
        return y * 2.0 if self.training else y - 1.0


def test_train_eval_toggle(rng):
    m = Branchy()
    cm = kiln.compile(m, skip=True)
    x = f32(rng, 3, 5)
    w, b = m.fc.weight.numpy().astype(np.float64), m.fc.bias.numpy().astype(np.float64)
    y = x.numpy().astype(np.float64) @ w.T + b
    with kiln.no_grad():
        for mode in (True, False, True, False):
            cm.train(mode)
            for _ in range(CALLS):
                close(cm(x), y * 2.0 if mode else y - 1.0)
    assert skipping(cm).skipped_calls > 0


def test_forward_hook_added_later_runs(rng):
    m = MLP()
    cm = kiln.compile(m, skip=True)
    x = f32(rng, 2, 6)
    with kiln.no_grad():
        for _ in range(CALLS):
            cm(x)
        handle = m.register_forward_hook(lambda mod, args, out: out * 0.5)
        # the hook calls a lambda (user code, no writes): skippable again once verified
        for _ in range(CALLS):
            close(cm(x), mlp_ref(m, x) * 0.5)
        handle.remove()
        close(cm(x), mlp_ref(m, x))


def test_side_effects_are_never_skipped(rng, capsys):
    log = []
    w = f32(rng, 4, 4)

    @kiln.compile(skip=True)
    def appends(x):
        log.append(1)
        return x @ w

    @kiln.compile(skip=True)
    def prints(x):
        print("step")
        return x @ w

    x = f32(rng, 3, 4)
    want = x.numpy().astype(np.float64) @ w.numpy().astype(np.float64)
    for _ in range(CALLS):
        close(appends(x), want)
        close(prints(x), want)
    assert len(log) == CALLS
    assert capsys.readouterr().out.count("step") == CALLS
    assert appends.skipped_calls == 0 and "append" in appends.why_not_skipped
    assert prints.skipped_calls == 0 and "print" in prints.why_not_skipped


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1  # an attribute write: state a skipped call would not update
        return self.fc(x)


def test_attribute_write_in_forward_is_never_skipped(rng):
    m = Counter()
    cm = kiln.compile(m, skip=True)
    with kiln.no_grad():
        for _ in range(CALLS):
            cm(f32(rng, 2, 4))
    assert m.calls == CALLS
    assert skipping(cm).skipped_calls == 0


SCALE = 2.0


def scaled(x, w):
    return (x @ w) * SCALE


def test_a_global_read_by_the_body_changing(rng):
    global SCALE
    fn = kiln.compile(scaled, skip=True)
    x, w = f32(rng, 3, 4), f32(rng, 4, 2)
    base = x.numpy().astype(np.float64) @ w.numpy().astype(np.float64)
    try:
        for value in (2.0, 5.0, -1.5):
            SCALE = value
            for _ in range(CALLS):
                close(fn(x, w), base * value)
        assert fn.skipped_calls > 0, fn.why_not_skipped
    finally:
        SCALE = 2.0


def test_a_closure_value_changing(rng):
    factor = 3.0
    w = f32(rng, 4, 4)

    @kiln.compile(skip=True)
    def fn(x):
        return (x @ w) * factor

    x = f32(rng, 2, 4)
    base = x.numpy().astype(np.float64) @ w.numpy().astype(np.float64)
    for value in (3.0, 0.5):
        factor = value  # noqa: F841  (read by fn through its closure)
        for _ in range(CALLS):
            close(fn(x), base * value)
    assert fn.skipped_calls > 0, fn.why_not_skipped


def test_non_tensor_arguments(rng):
    @kiln.compile(skip=True)
    def fn(x, scale, square):
        y = x * scale + 1.0
        return y * y if square else y

    x = f32(rng, 5)
    xs = x.numpy().astype(np.float64)
    for scale, square in ((2.0, False), (3.0, False), (2.0, True), (2.0, False)):
        for _ in range(CALLS):
            y = xs * scale + 1.0
            close(fn(x, scale, square), y * y if square else y)
    assert fn.skipped_calls > 0, fn.why_not_skipped


def test_a_graph_break_in_the_body_is_never_skipped(rng):
    w = f32(rng, 4, 4)

    @kiln.compile(skip=True)
    def fn(x):
        y = x @ w
        if y.sum().item() > 0:  # a host read: the body's trace is cut in two
            return y * 2.0
        return y * -1.0

    for _ in range(CALLS):
        x = f32(rng, 3, 4)
        y = x.numpy().astype(np.float64) @ w.numpy().astype(np.float64)
        close(fn(x), y * 2.0 if y.sum() > 0 else y * -1.0)
    assert fn.skipped_calls == 0


def test_random_ops_are_never_skipped(rng):
    @kiln.compile(skip=True)
    def fn(x):
        return x + kiln.rand(3)

    x = f32(rng, 3)
    outs = [fn(x).numpy() for _ in range(CALLS)]
    assert fn.skipped_calls == 0
    assert len({o.tobytes() for o in outs}) == CALLS  # fresh numbers every call


def test_shape_change_runs_the_body(rng):
    m = MLP()
    cm = kiln.compile(m, skip=True)
    with kiln.no_grad():
        for rows in (4, 4, 4, 4, 4, 4, 7, 7, 4):
            x = f32(rng, rows, 6)
            close(cm(x), mlp_ref(m, x))
    assert skipping(cm).skipped_calls > 0


def test_autograd_needs_the_body(rng):
    m = MLP()
    cm = kiln.compile(m, skip=True)
    x = f32(rng, 4, 6)
    with kiln.no_grad():
        for _ in range(CALLS):
            cm(x)
    skipped = skipping(cm).skipped_calls
    y = cm(x)  # grad mode on, parameters require grad: the call needs the body
    assert y.requires_grad
    y.sum().backward()
    assert m.fc1.weight.grad is not None
    assert skipping(cm).skipped_calls == skipped


def test_structured_results_and_inputs_returned(rng):
    w = f32(rng, 3, 3)

    @kiln.compile(skip=True)
    def fn(x):
        y = x @ w
        return {"y": y, "both": (y + 1.0, x), "tag": "ok", "n": 3}

    for _ in range(CALLS):
        x = f32(rng, 2, 3)
        out = fn(x)
        y = x.numpy().astype(np.float64) @ w.numpy().astype(np.float64)
        close(out["y"], y)
        close(out["both"][0], y + 1.0)
        assert out["both"][1] is x or np.array_equal(out["both"][1].numpy(), x.numpy())
        assert out["tag"] == "ok" and out["n"] == 3
    assert fn.skipped_calls > 0, fn.why_not_skipped


def test_verify_mode_checks_launches(rng):
    kiln.set_config(verify=True)
    w = f32(rng, 4, 4)

    @kiln.compile(skip=True)
    def fn(x):
        return F.relu(x @ w) * 0.5 + 1.0

    for _ in range(CALLS):
        x = f32(rng, 3, 4)
        y = np.maximum(x.numpy().astype(np.float64) @ w.numpy().astype(np.float64), 0)
        close(fn(x), y * 0.5 + 1.0)
    assert fn.skipped_calls > 0, fn.why_not_skipped
