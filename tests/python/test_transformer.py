"""kiln.nn.Transformer and its encoder / decoder (layers) against torch.nn on copied
weights (state_dicts load both ways): outputs and the gradients of inputs and every
parameter, with causal and key-padding masks, batch_first, norm_first, gelu; deepcopy
of modules (TransformerEncoder clones its layer)."""

import copy

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, torch

pytestmark = requires_torch

TOL = dict(rtol=1e-8, atol=1e-10)


def pair(make, dtype="float64"):
    tm = make(torch).to(getattr(torch, dtype))
    km = make(kiln).to(getattr(kiln, dtype))
    assert list(km.state_dict()) == list(tm.state_dict())
    km.load_state_dict(tm.state_dict())
    tm.train()  # dropout=0 below: training mode keeps torch off its fused eval fast path
    return km, tm


def leaf(rng, shape):
    a = rng.standard_normal(shape)
    return k(a).requires_grad_(True), t(a).requires_grad_(True)


def backprop_and_compare(rng, km, tm, yk, yt, leaves):
    assert_close(yk, yt.detach(), **TOL)
    w = rng.standard_normal(tuple(yt.shape))
    (yk * k(w)).sum().backward()
    (yt * t(w)).sum().backward()
    for a, b in leaves:
        assert_close(a.grad, b.grad, **TOL)
    tp = dict(tm.named_parameters())
    for name, p in km.named_parameters():
        assert_close(p.grad, tp[name].grad, **TOL)


def _pad_mask(lib, batch, length):
    m = np.zeros((batch, length), dtype=bool)
    m[0, -2:] = True  # the first sequence is shorter
    return lib.tensor(m)


@pytest.mark.parametrize("kwargs", [dict(), dict(batch_first=True), dict(norm_first=True),
                                    dict(activation="gelu", batch_first=True, norm_first=True)])
def test_transformer_matches_torch(rng, kwargs):
    km, tm = pair(lambda lib: lib.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2,
                                                 num_decoder_layers=2, dim_feedforward=16,
                                                 dropout=0.0, **kwargs))
    bf = kwargs.get("batch_first", False)
    src_shape = (3, 5, 8) if bf else (5, 3, 8)
    tgt_shape = (3, 4, 8) if bf else (4, 3, 8)
    (sk, st), (gk, gt) = leaf(rng, src_shape), leaf(rng, tgt_shape)
    mk = kiln.nn.Transformer.generate_square_subsequent_mask(4).to(kiln.float64)
    mt = torch.nn.Transformer.generate_square_subsequent_mask(4).double()
    assert_close(mk, mt)
    yk = km(sk, gk, tgt_mask=mk, src_key_padding_mask=_pad_mask(kiln, 3, 5),
            memory_key_padding_mask=_pad_mask(kiln, 3, 5))
    yt = tm(st, gt, tgt_mask=mt, src_key_padding_mask=_pad_mask(torch, 3, 5),
            memory_key_padding_mask=_pad_mask(torch, 3, 5))
    backprop_and_compare(rng, km, tm, yk, yt, [(sk, st), (gk, gt)])


def test_encoder_alone_matches_torch(rng):
    def make(lib):
        layer = lib.nn.TransformerEncoderLayer(8, 4, dim_feedforward=12, dropout=0.0,
                                               batch_first=True)
        return lib.nn.TransformerEncoder(layer, 3, norm=lib.nn.LayerNorm(8))

    km, tm = pair(make)
    xk, xt = leaf(rng, (2, 6, 8))
    causal_k = kiln.nn.Transformer.generate_square_subsequent_mask(6).to(kiln.float64)
    causal_t = torch.nn.Transformer.generate_square_subsequent_mask(6).double()
    backprop_and_compare(rng, km, tm, km(xk, mask=causal_k), tm(xt, mask=causal_t), [(xk, xt)])


def test_decoder_layer_alone_matches_torch(rng):
    km, tm = pair(lambda lib: lib.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0))
    (gk, gt), (mk, mt) = leaf(rng, (4, 2, 8)), leaf(rng, (6, 2, 8))
    backprop_and_compare(rng, km, tm, km(gk, mk), tm(gt, mt), [(gk, gt), (mk, mt)])


def test_layers_are_independent_copies_and_deepcopy_works():
    layer = kiln.nn.TransformerEncoderLayer(8, 2, 16)
    enc = kiln.nn.TransformerEncoder(layer, 2)
    a, b = enc.layers[0].linear1.weight, enc.layers[1].linear1.weight
    assert a is not b and a is not layer.linear1.weight
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert isinstance(a, kiln.nn.Parameter) and a.requires_grad
    clone = copy.deepcopy(enc)
    with kiln.no_grad():
        clone.layers[0].linear1.weight.fill_(0.0)
    assert np.abs(enc.layers[0].linear1.weight.numpy()).sum() > 0


@pytest.mark.parametrize("build", [
    lambda lib: lib.nn.Transformer(8, 2, 1, 1, 16)(lib.zeros(5, 3, 8), lib.zeros(4, 2, 8)),
    lambda lib: lib.nn.Transformer(8, 2, 1, 1, 16)(lib.zeros(5, 3, 6), lib.zeros(4, 3, 6)),
    lambda lib: lib.nn.TransformerEncoderLayer(8, 2, activation="swish"),
])
def test_errors_match_torch_types(build):
    with pytest.raises(Exception) as et:
        build(torch)
    with pytest.raises(et.type):
        build(kiln)
