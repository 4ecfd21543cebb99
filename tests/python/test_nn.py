"""kiln.nn against torch.nn: each module gets the torch module's weights (through
load_state_dict) and must give the same outputs on fresh random inputs; plus the
Module API (parameters, state_dict, train/eval, to) and kiln.nn.functional."""

import math

import numpy as np
import pytest

import kiln
import kiln.nn as knn
import kiln.nn.functional as KF
from helpers import assert_close, k, randn, requires_torch, t, to_np, torch

pytestmark = requires_torch


def pair(tmod, kmod):
    """Loads tmod's weights into kmod (torch tensors go through numpy)."""
    missing, unexpected = kmod.load_state_dict(tmod.state_dict())
    assert not missing and not unexpected
    tmod.eval()
    kmod.eval()
    return tmod, kmod


def check(tmod, kmod, *inputs, rtol=1e-4, atol=1e-5):
    tmod, kmod = pair(tmod, kmod)
    with torch.no_grad():
        expected = tmod(*[t(a) if isinstance(a, np.ndarray) else a for a in inputs])
    got = kmod(*[k(a) if isinstance(a, np.ndarray) else a for a in inputs])
    assert_close(got, expected, rtol=rtol, atol=atol)
    return got


# ---- layers


@pytest.mark.parametrize("bias", [True, False])
def test_linear(rng, bias):
    check(torch.nn.Linear(7, 5, bias=bias), knn.Linear(7, 5, bias=bias), randn(rng, 3, 4, 7))


@pytest.mark.parametrize("shape,affine", [((8,), True), ((4, 8), True), ((8,), False)])
def test_layer_norm(rng, shape, affine):
    tmod = torch.nn.LayerNorm(shape, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            tmod.weight.copy_(torch.from_numpy(randn(rng, *shape)))
            tmod.bias.copy_(torch.from_numpy(randn(rng, *shape)))
    check(tmod, knn.LayerNorm(shape, elementwise_affine=affine), randn(rng, 2, 4, 8) * 3 + 1)


def test_embedding(rng):
    idx = rng.integers(0, 11, (3, 5))
    check(torch.nn.Embedding(11, 4), knn.Embedding(11, 4), idx)
    e = knn.Embedding(6, 3, padding_idx=2)
    assert to_np(e.weight)[2].tolist() == [0, 0, 0]


@pytest.mark.parametrize("stride,padding,bias", [(1, 0, True), (2, 1, False), ((2, 1), (0, 2), True)])
def test_conv2d(rng, stride, padding, bias):
    check(torch.nn.Conv2d(3, 5, (3, 2), stride, padding, bias=bias),
          knn.Conv2d(3, 5, (3, 2), stride, padding, bias=bias), randn(rng, 2, 3, 10, 9),
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cls", ["MaxPool2d", "AvgPool2d"])
@pytest.mark.parametrize("args", [(2,), (3, 2, 1), ((2, 3), (1, 2))])
def test_pooling(rng, cls, args):
    check(getattr(torch.nn, cls)(*args), getattr(knn, cls)(*args), randn(rng, 2, 3, 9, 8))


@pytest.mark.parametrize("name,args", [
    ("ReLU", ()), ("GELU", ()), ("GELU", ("tanh",)), ("SiLU", ()), ("Tanh", ()),
    ("Sigmoid", ()), ("Softmax", (1,)), ("LogSoftmax", (-1,)), ("Flatten", ()),
    ("Flatten", (0, 1)), ("Identity", ()),
])
def test_activations(rng, name, args):
    check(getattr(torch.nn, name)(*args), getattr(knn, name)(*args), randn(rng, 3, 4, 5) * 2)


def test_sequential_and_module_list(rng):
    tseq = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    kseq = knn.Sequential(knn.Linear(6, 8), knn.ReLU(), knn.Linear(8, 3))
    check(tseq, kseq, randn(rng, 5, 6))
    assert len(kseq) == 3 and isinstance(kseq[1], knn.ReLU) and len(kseq[1:]) == 2
    assert [type(m).__name__ for m in kseq] == ["Linear", "ReLU", "Linear"]
    ml = knn.ModuleList([knn.Linear(2, 2) for _ in range(3)])
    ml.append(knn.Tanh())
    assert len(ml) == 4 and len(list(ml.parameters())) == 6
    md = knn.ModuleDict({"a": knn.Linear(2, 3)})
    assert "a" in md and len(list(md.parameters())) == 2


def test_dropout(rng):
    kiln.manual_seed(0)
    x = kiln.ones(200, 100)
    d = knn.Dropout(0.3)
    y = to_np(d(x))
    zeros = (y == 0).mean()
    assert abs(zeros - 0.3) < 0.02
    np.testing.assert_allclose(y[y != 0], 1 / 0.7, rtol=1e-6)
    d.eval()
    assert d(x) is x
    assert KF.dropout(x, 0.5, training=False) is x
    assert to_np(KF.dropout(x, 1.0)).sum() == 0
    y1, y2 = to_np(KF.dropout(x, 0.5)), to_np(KF.dropout(x, 0.5))
    assert not np.array_equal(y1, y2)  # fresh random numbers every call


def test_multihead_attention_matches_torch(rng):
    for batch_first in (False, True):
        tm = torch.nn.MultiheadAttention(16, 4, batch_first=batch_first)
        km = knn.MultiheadAttention(16, 4, batch_first=batch_first)
        pair(tm, km)
        shape = (2, 5, 16) if batch_first else (5, 2, 16)
        q, kv = randn(rng, *shape), randn(rng, *shape)
        mask = np.triu(np.ones((5, 5), bool), 1)
        with torch.no_grad():
            eo, ew = tm(t(q), t(kv), t(kv), attn_mask=t(mask))
        go, gw = km(k(q), k(kv), k(kv), attn_mask=k(mask))
        assert_close(go, eo, rtol=1e-4, atol=1e-5)
        assert_close(gw, ew, rtol=1e-4, atol=1e-5)


# ---- losses


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(rng, reduction):
    logits, target = randn(rng, 6, 5) * 2, rng.integers(0, 5, 6)
    expected = torch.nn.functional.cross_entropy(t(logits), t(target), reduction=reduction)
    assert_close(KF.cross_entropy(k(logits), k(target), reduction=reduction), expected,
                 rtol=1e-5, atol=1e-6)
    assert_close(knn.CrossEntropyLoss(reduction=reduction)(k(logits), k(target)),
                 torch.nn.CrossEntropyLoss(reduction=reduction)(t(logits), t(target)),
                 rtol=1e-5, atol=1e-6)


def test_cross_entropy_variants(rng):
    F = torch.nn.functional
    logits, target = randn(rng, 6, 5), rng.integers(0, 5, 6)
    target[1] = -100
    w = np.abs(randn(rng, 5)) + 0.1
    assert_close(KF.cross_entropy(k(logits), k(target)), F.cross_entropy(t(logits), t(target)),
                 rtol=1e-5)
    assert_close(KF.cross_entropy(k(logits), k(target), weight=k(w)),
                 F.cross_entropy(t(logits), t(target), weight=t(w)), rtol=1e-5)
    target[1] = 3
    assert_close(KF.cross_entropy(k(logits), k(target), ignore_index=3),
                 F.cross_entropy(t(logits), t(target), ignore_index=3), rtol=1e-5)
    assert_close(KF.cross_entropy(k(logits), k(target), label_smoothing=0.1),
                 F.cross_entropy(t(logits), t(target), label_smoothing=0.1), rtol=1e-5)
    probs = np.abs(randn(rng, 6, 5))
    probs /= probs.sum(1, keepdims=True)
    assert_close(KF.cross_entropy(k(logits), k(probs)), F.cross_entropy(t(logits), t(probs)),
                 rtol=1e-5)
    img, tgt = randn(rng, 2, 4, 3, 3), rng.integers(0, 4, (2, 3, 3))
    assert_close(KF.cross_entropy(k(img), k(tgt)), F.cross_entropy(t(img), t(tgt)), rtol=1e-5)
    assert_close(KF.cross_entropy(k(logits[0]), k(np.array(2))),
                 F.cross_entropy(t(logits[0]), torch.tensor(2)), rtol=1e-5)
    logp = F.log_softmax(t(logits), 1).numpy()
    assert_close(KF.nll_loss(k(logp), k(target)), F.nll_loss(t(logp), t(target)), rtol=1e-5)
    a, b = randn(rng, 4, 3), randn(rng, 4, 3)
    assert_close(KF.mse_loss(k(a), k(b)), F.mse_loss(t(a), t(b)), rtol=1e-5)
    assert_close(knn.MSELoss(reduction="sum")(k(a), k(b)), F.mse_loss(t(a), t(b), reduction="sum"),
                 rtol=1e-5)


# ---- functional


def test_functional(rng):
    F = torch.nn.functional
    x = randn(rng, 4, 6) * 2
    w, b = randn(rng, 3, 6), randn(rng, 3)
    assert_close(KF.relu(k(x)), F.relu(t(x)))
    assert_close(KF.gelu(k(x)), F.gelu(t(x)), rtol=1e-5, atol=1e-6)
    assert_close(KF.gelu(k(x), approximate="tanh"), F.gelu(t(x), approximate="tanh"), rtol=1e-5,
                 atol=1e-6)
    assert_close(KF.silu(k(x)), F.silu(t(x)), rtol=1e-5, atol=1e-6)
    assert_close(KF.softmax(k(x), dim=-1), F.softmax(t(x), dim=-1), rtol=1e-5, atol=1e-6)
    assert_close(KF.log_softmax(k(x), 0), F.log_softmax(t(x), 0), rtol=1e-5, atol=1e-6)
    assert_close(KF.softmax(k(x), 1, dtype=kiln.float64), F.softmax(t(x), 1, dtype=torch.float64),
                 rtol=1e-6)
    assert_close(KF.layer_norm(k(x), (6,)), F.layer_norm(t(x), (6,)), rtol=1e-4, atol=1e-5)
    assert_close(KF.layer_norm(k(x), 6, k(w[0]), k(b[:1].repeat(6))),
                 F.layer_norm(t(x), (6,), t(w[0]), t(b[:1].repeat(6))), rtol=1e-4, atol=1e-5)
    assert_close(KF.linear(k(x), k(w), k(b)), F.linear(t(x), t(w), t(b)), rtol=1e-5, atol=1e-5)
    img, cw = randn(rng, 1, 2, 6, 6), randn(rng, 3, 2, 3, 3)
    assert_close(KF.conv2d(k(img), k(cw), padding=1), F.conv2d(t(img), t(cw), padding=1),
                 rtol=1e-4, atol=1e-4)
    assert_close(KF.max_pool2d(k(img), 2), F.max_pool2d(t(img), 2))
    assert_close(KF.avg_pool2d(k(img), 3, 1, 1), F.avg_pool2d(t(img), 3, 1, 1), rtol=1e-5)
    idx = rng.integers(0, 3, (2, 4))
    assert_close(KF.embedding(k(idx), k(w)), F.embedding(t(idx), t(w)))
    assert_close(KF.one_hot(k(idx), 5), F.one_hot(t(idx), 5))
    assert_close(KF.one_hot(k(idx)), F.one_hot(t(idx)))
    xr = k(x)
    assert KF.relu(xr, inplace=True) is xr
    assert_close(xr, F.relu(t(x)))


@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention(rng, causal):
    q, kk, v = randn(rng, 2, 3, 5, 8), randn(rng, 2, 3, 5, 8), randn(rng, 2, 3, 5, 8)
    scores = t(q) @ t(kk).transpose(-2, -1) / math.sqrt(8)
    if causal:
        scores = scores.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    expected = torch.softmax(scores, -1) @ t(v)
    got = KF.scaled_dot_product_attention(k(q), k(kk), k(v), is_causal=causal)
    assert_close(got, expected, rtol=1e-4, atol=1e-5)


# ---- the Module API


if torch is not None:
    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
            self.norm = torch.nn.LayerNorm(8)
            self.head = torch.nn.Linear(8, 2)
            self.register_buffer("scale", torch.ones(2) * 2)

        def forward(self, x):
            return self.head(self.norm(self.body(x))) * self.scale


class KilnNet(knn.Module):
    def __init__(self):
        super().__init__()
        self.body = knn.Sequential(knn.Linear(4, 8), knn.ReLU())
        self.norm = knn.LayerNorm(8)
        self.head = knn.Linear(8, 2)
        self.register_buffer("scale", kiln.ones(2) * 2)

    def forward(self, x):
        return self.head(self.norm(self.body(x))) * self.scale


def test_module_api_matches_torch(rng):
    tn, kn = TorchNet(), KilnNet()
    assert [n for n, _ in kn.named_parameters()] == [n for n, _ in tn.named_parameters()]
    assert list(kn.state_dict()) == list(tn.state_dict())
    assert [n for n, _ in kn.named_modules()] == [n for n, _ in tn.named_modules()]
    assert [n for n, _ in kn.named_children()] == [n for n, _ in tn.named_children()]
    assert [n for n, _ in kn.named_buffers()] == [n for n, _ in tn.named_buffers()]
    assert len(list(kn.modules())) == len(list(tn.modules()))
    for (_, p), (_, q) in zip(kn.named_parameters(), tn.named_parameters()):
        assert tuple(p.shape) == tuple(q.shape)
        assert isinstance(p, knn.Parameter)
    check(tn, kn, randn(rng, 3, 4))
    assert not kn.training and not kn.body[0].training
    kn.train()
    assert kn.training and kn.head.training
    assert kn.eval() is kn


def test_state_dict_round_trip_and_numpy(rng):
    a, b = KilnNet(), KilnNet()
    sd = {name: to_np(v) for name, v in a.state_dict().items()}
    b.load_state_dict(sd)
    x = k(randn(rng, 2, 4))
    assert_close(b(x), to_np(a(x)))
    b.load_state_dict(a.state_dict())
    sd_b = b.state_dict()
    assert sd_b["head.weight"] is b.head.weight  # the module's own tensors
    with pytest.raises(RuntimeError, match="Missing key"):
        b.load_state_dict({"head.weight": sd["head.weight"]})
    r = b.load_state_dict({"head.weight": sd["head.weight"], "extra": sd["scale"]}, strict=False)
    assert "extra" in r.unexpected_keys and "head.bias" in r.missing_keys
    bad = dict(sd)
    bad["head.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match="size mismatch for head.weight"):
        b.load_state_dict(bad)


def test_load_state_dict_keeps_parameter_identity(rng):
    m = knn.Linear(3, 2)
    w = m.weight
    m.load_state_dict({"weight": randn(rng, 2, 3), "bias": randn(rng, 2)})
    assert m.weight is w


def test_module_to_keeps_tied_weights_tied(rng):
    """GPT-style weight tying (the embedding and the output layer share one Parameter)
    survives .to(): one tensor, trained once, as in PyTorch."""
    m = knn.Module()
    m.wte = knn.Embedding(7, 4)
    m.head = knn.Linear(4, 7, bias=False)
    m.wte.weight = m.head.weight
    m.to(kiln.float64)
    assert m.wte.weight is m.head.weight and m.head.weight.dtype == kiln.float64
    assert len(list(m.parameters())) == 1
    with kiln.no_grad():
        m.head.weight.copy_(kiln.tensor(randn(rng, 7, 4)))  # writes show through both names
    np.testing.assert_array_equal(m.wte.weight.numpy(), m.head.weight.numpy())


def test_module_to_dtype_and_attributes():
    m = KilnNet().to(kiln.float64)
    assert all(p.dtype == kiln.float64 for p in m.parameters())
    assert m.scale.dtype == kiln.float64
    assert isinstance(m.head.weight, knn.Parameter)
    m.half()
    assert m.head.weight.dtype == kiln.float16
    m.float()
    assert m(kiln.ones(1, 4)).dtype == kiln.float32
    m.cpu()
    with pytest.raises(AttributeError):
        m.nothing_here
    m.head.bias = None
    assert [n for n, _ in m.head.named_parameters()] == ["weight"]
    m.head.weight = kiln.zeros(2, 8)
    assert isinstance(m.head.weight, knn.Parameter)
    del m.norm
    assert "norm" not in dict(m.named_children())
    with pytest.raises(TypeError):
        m.head.weight = 3


def test_parameter_and_repr():
    p = knn.Parameter(kiln.zeros(2))
    assert isinstance(p, kiln.Tensor) and isinstance(p, knn.Parameter)
    assert not isinstance(kiln.zeros(2), knn.Parameter)
    assert repr(knn.Linear(3, 4)) == repr(torch.nn.Linear(3, 4))
    assert repr(knn.Sequential(knn.Linear(3, 4), knn.ReLU())) == \
        repr(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()))


def test_initialization_like_torch():
    kiln.manual_seed(3)
    m = knn.Linear(100, 400)
    w, b = to_np(m.weight), to_np(m.bias)
    bound = 1 / math.sqrt(100)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound
    assert np.abs(b).max() <= bound
    c = knn.Conv2d(4, 8, 3)
    bound = 1 / math.sqrt(4 * 9)
    assert np.abs(to_np(c.weight)).max() <= bound
    e = to_np(knn.Embedding(1000, 20).weight)
    assert abs(e.mean()) < 0.02 and abs(e.std() - 1) < 0.02
    w2 = knn.Linear(100, 400).weight
    assert not np.array_equal(to_np(w2), w)
