"""kiln.nn.utils.fusion (fuse_conv_bn_eval / fuse_conv_bn_weights, fuse_linear_bn_eval /
fuse_linear_bn_weights) against torch.nn.utils.fusion on copied weights and running
statistics: the fused parameters, the fused layer's output against torch's unfused
conv -> bn in eval mode, missing bias / affine parameters, the transposed layout, the
originals left untouched, and PyTorch's AssertionError for a module in training mode."""

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, torch

pytestmark = requires_torch

from kiln.nn.utils.fusion import (fuse_conv_bn_eval, fuse_conv_bn_weights,  # noqa: E402
                                  fuse_linear_bn_eval, fuse_linear_bn_weights)
if torch is not None:  # where PyTorch is not importable, the module is collected and skipped
    from torch.nn.utils import fusion as tfusion  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-5)


def copy_into(km, tm):
    km.load_state_dict({name: v.detach().numpy() for name, v in tm.state_dict().items()})


def trained_bn(tcls, channels, rng, affine=True, eps=1e-5):
    """A torch BatchNorm with non-trivial running statistics and affine parameters."""
    bn = tcls(channels, affine=affine, eps=eps)
    with torch.no_grad():
        bn.running_mean.copy_(torch.from_numpy(rng.standard_normal(channels).astype(np.float32)))
        bn.running_var.copy_(torch.from_numpy(rng.uniform(0.2, 3.0, channels).astype(np.float32)))
        if affine:
            bn.weight.copy_(torch.from_numpy(rng.standard_normal(channels).astype(np.float32)))
            bn.bias.copy_(torch.from_numpy(rng.standard_normal(channels).astype(np.float32)))
    return bn.eval()


@pytest.mark.parametrize("conv_cls, bn_cls, shape, bias, affine", [
    ("Conv2d", "BatchNorm2d", (2, 3, 9, 8), True, True),
    ("Conv2d", "BatchNorm2d", (1, 3, 7, 7), False, True),
    ("Conv2d", "BatchNorm2d", (2, 3, 6, 5), True, False),
    ("Conv1d", "BatchNorm1d", (2, 3, 11), False, True),
])
def test_fuse_conv_bn_eval_matches_torch(rng, conv_cls, bn_cls, shape, bias, affine):
    tconv = getattr(torch.nn, conv_cls)(3, 5, 3, padding=1, bias=bias).eval()
    tbn = trained_bn(getattr(torch.nn, bn_cls), 5, rng, affine=affine, eps=1e-3)
    kconv = getattr(kiln.nn, conv_cls)(3, 5, 3, padding=1, bias=bias).eval()
    kbn = getattr(kiln.nn, bn_cls)(5, affine=affine, eps=1e-3).eval()
    copy_into(kconv, tconv)
    copy_into(kbn, tbn)
    before = kconv.weight.numpy().copy()

    tfused = tfusion.fuse_conv_bn_eval(tconv, tbn)
    kfused = fuse_conv_bn_eval(kconv, kbn)
    assert type(kfused) is type(kconv) and kfused is not kconv
    assert_close(kfused.weight, tfused.weight.detach(), **TOL)
    assert_close(kfused.bias, tfused.bias.detach(), **TOL)
    assert isinstance(kfused.weight, kiln.nn.Parameter) and kfused.weight.requires_grad
    assert [n for n, _ in kfused.named_parameters()] == ["weight", "bias"]
    np.testing.assert_array_equal(kconv.weight.numpy(), before)  # the original untouched
    assert (kconv.bias is None) == (not bias)

    x = rng.standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        want = tbn(tconv(t(x)))
    assert_close(kfused(k(x)), want, rtol=1e-4, atol=1e-4)


def test_fuse_conv_bn_weights_matches_torch_transposed_and_without_bias(rng):
    w = rng.standard_normal((4, 6, 3, 3)).astype(np.float32)  # transposed: [in, out, kh, kw]
    rm = rng.standard_normal(6).astype(np.float32)
    rv = rng.uniform(0.5, 2.0, 6).astype(np.float32)
    bw = rng.standard_normal(6).astype(np.float32)
    bb = rng.standard_normal(6).astype(np.float32)
    for transpose in (True, False):
        ww = w if transpose else w.transpose(1, 0, 2, 3).copy()
        tw, tb = tfusion.fuse_conv_bn_weights(t(ww), None, t(rm), t(rv), 1e-5, t(bw), t(bb),
                                              transpose)
        kw, kb = fuse_conv_bn_weights(k(ww), None, k(rm), k(rv), 1e-5, k(bw), k(bb), transpose)
        assert_close(kw, tw.detach(), **TOL)
        assert_close(kb, tb.detach(), **TOL)
    tw, tb = tfusion.fuse_conv_bn_weights(t(ww), t(bb), t(rm), t(rv), 1e-5, None, None)
    kw, kb = fuse_conv_bn_weights(k(ww), k(bb), k(rm), k(rv), 1e-5, None, None)
    assert_close(kw, tw.detach(), **TOL)
    assert_close(kb, tb.detach(), **TOL)


@pytest.mark.parametrize("bias", [True, False])
def test_fuse_linear_bn_eval_matches_torch(rng, bias):
    tlin = torch.nn.Linear(6, 4, bias=bias).eval()
    tbn = trained_bn(torch.nn.BatchNorm1d, 4, rng)
    klin = kiln.nn.Linear(6, 4, bias=bias).eval()
    kbn = kiln.nn.BatchNorm1d(4).eval()
    copy_into(klin, tlin)
    copy_into(kbn, tbn)
    kfused = fuse_linear_bn_eval(klin, kbn)
    tfused = tfusion.fuse_linear_bn_eval(tlin, tbn)
    assert_close(kfused.weight, tfused.weight.detach(), **TOL)
    assert_close(kfused.bias, tfused.bias.detach(), **TOL)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    with torch.no_grad():
        want = tbn(tlin(t(x)))
    assert_close(kfused(k(x)), want, rtol=1e-4, atol=1e-4)
    kw, kb = fuse_linear_bn_weights(klin.weight, klin.bias, kbn.running_mean, kbn.running_var,
                                    kbn.eps, kbn.weight, kbn.bias)
    assert_close(kw, tfused.weight.detach(), **TOL)
    assert_close(kb, tfused.bias.detach(), **TOL)


def test_fusion_refuses_training_mode_as_torch():
    conv, bn = kiln.nn.Conv2d(2, 3, 1), kiln.nn.BatchNorm2d(3)
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        fuse_conv_bn_eval(conv, bn.eval())  # conv still training
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        fuse_conv_bn_eval(conv.eval(), bn.train())
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        fuse_linear_bn_eval(kiln.nn.Linear(2, 3), kiln.nn.BatchNorm1d(3).eval())
