"""CUDA legs of the nn suites (test_losses.py, test_nn.py, test_norm_layers.py,
test_optim.py, test_conv_transpose.py, test_hooks.py): losses, normalizations, activations and modules forward and backward
(parameter gradients too), and optimizer steps, on CUDA against the same on the CPU --
whose results the torch-oracle tests check. No torch: these run on the GPU machine."""

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from helpers import NoGrad, check_module_on_cuda, check_on_cuda, check_optimizer_on_cuda, randn

REDUCTIONS = ["none", "sum", "mean"]
TOL = dict(rtol=1e-4, atol=1e-5)


def targets(rng, n_classes, shape, ignore=None):
    tg = rng.integers(0, n_classes, shape)
    if ignore is not None:
        tg.reshape(-1)[::3] = ignore
    return tg


# ---- losses: values and input gradients

CE_SHAPES = [((6, 5), (6,)), ((2, 4, 3, 2), (2, 3, 2)), ((5,), ())]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shapes", CE_SHAPES, ids=str)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 1])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_cuda(cuda_leg, rng, shapes, reduction, weighted, ignore, smoothing):
    x_shape, t_shape = shapes
    classes = x_shape[0] if len(x_shape) == 1 else x_shape[1]
    x = randn(rng, *x_shape) * 2
    tg = targets(rng, classes, t_shape, ignore if t_shape else None)
    w = NoGrad(np.abs(randn(rng, classes)) + 0.5) if weighted else None
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    if ignore is not None:
        kw["ignore_index"] = ignore
    check_on_cuda(cuda_leg, lambda x, t, w: F.cross_entropy(x, t, w, **kw), x, tg, w,
                  grad=True, **TOL)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_probability_targets_cuda(cuda_leg, rng, reduction, smoothing):
    x = randn(rng, 6, 5) * 2
    p = rng.random((6, 5)).astype(np.float32)
    p /= p.sum(1, keepdims=True)
    check_on_cuda(cuda_leg, lambda x, p: F.cross_entropy(x, p, reduction=reduction,
                                                         label_smoothing=smoothing),
                  x, NoGrad(p), grad=True, **TOL)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_cuda(cuda_leg, rng, reduction, weighted):
    x = randn(rng, 6, 5)
    w = NoGrad(np.abs(randn(rng, 5)) + 0.5) if weighted else None
    check_on_cuda(cuda_leg, lambda x, t, w: F.nll_loss(x, t, w, reduction=reduction), x,
                  targets(rng, 5, (6,)), w, grad=True, **TOL)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_regression_losses_cuda(cuda_leg, rng, name, reduction, dtype):
    a, b = randn(rng, 4, 7, dtype=dtype) * 2, randn(rng, 4, 7, dtype=dtype)
    check_on_cuda(cuda_leg, lambda a, b: getattr(F, name)(a, b, reduction=reduction), a, b,
                  grad=True, **TOL)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pos_weighted", [False, True])
def test_bce_with_logits_cuda(cuda_leg, rng, reduction, weighted, pos_weighted):
    x, y = randn(rng, 5, 4) * 3, rng.random((5, 4)).astype(np.float32)
    w = NoGrad(rng.random((5, 4)).astype(np.float32)) if weighted else None
    pw = NoGrad(rng.random(4).astype(np.float32) + 0.5) if pos_weighted else None
    check_on_cuda(cuda_leg, lambda x, y, w, pw: F.binary_cross_entropy_with_logits(
        x, y, w, reduction=reduction, pos_weight=pw), x, NoGrad(y), w, pw, grad=True, **TOL)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy_cuda(cuda_leg, rng, reduction):
    p = rng.uniform(0.05, 0.95, (5, 4)).astype(np.float32)
    y = rng.random((5, 4)).astype(np.float32)
    check_on_cuda(cuda_leg, lambda p, y: F.binary_cross_entropy(p, y, reduction=reduction), p,
                  NoGrad(y), grad=True, **TOL)


# ---- normalizations and activations (functional)

@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 5), (2, 3, 4, 5)], ids=str)
def test_batch_norm_cuda(cuda_leg, rng, shape, training):
    x = randn(rng, *shape) * 2 + 1
    mean, var = randn(rng, 3) * 0.1, np.abs(randn(rng, 3)) + 0.5
    w, b = randn(rng, 3), randn(rng, 3)

    def fn(x, mean, var, w, b):
        out = F.batch_norm(x, mean, var, w, b, training=training)
        return out, mean, var  # the running statistics move when training
    check_on_cuda(cuda_leg, fn, x, NoGrad(mean), NoGrad(var), w, b, grad=True, **TOL)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm_cuda(cuda_leg, rng, groups):
    check_on_cuda(cuda_leg, lambda x, w, b: F.group_norm(x, groups, w, b),
                  randn(rng, 2, 4, 3, 5) * 2, randn(rng, 4), randn(rng, 4), grad=True, **TOL)


@pytest.mark.parametrize("affine", [False, True])
def test_rms_norm_cuda(cuda_leg, rng, affine):
    w = randn(rng, 6) if affine else None
    check_on_cuda(cuda_leg, lambda x, w: F.rms_norm(x, (6,), w), randn(rng, 3, 4, 6), w,
                  grad=True, **TOL)


ACTIVATIONS = [
    nn.ReLU, nn.GELU, nn.Tanh, nn.Sigmoid, nn.SiLU, nn.Mish, nn.ELU, nn.CELU, nn.SELU,
    nn.LeakyReLU, nn.Softplus, nn.Softsign, nn.Hardtanh, nn.Hardsigmoid, nn.Hardswish,
    nn.ReLU6, nn.LogSigmoid, nn.Tanhshrink, nn.Softshrink, nn.Hardshrink,
    lambda: nn.Softmax(-1), lambda: nn.LogSoftmax(1), lambda: nn.Softmin(-1),
    lambda: nn.GLU(-1), lambda: nn.Threshold(0.1, -1.0), nn.PReLU,
]


@pytest.mark.parametrize("make", ACTIVATIONS, ids=lambda m: getattr(m, "__name__", "lambda"))
def test_activation_modules_cuda(cuda_leg, rng, make):
    check_module_on_cuda(cuda_leg, make, randn(rng, 4, 6) * 3, rtol=1e-5, atol=1e-5)


# ---- modules forward and backward (input and parameter gradients)

MODULES = {
    "linear": (lambda: nn.Linear(6, 5), (3, 6)),
    "linear_nobias": (lambda: nn.Linear(6, 5, bias=False), (2, 3, 6)),
    "conv2d": (lambda: nn.Conv2d(3, 4, 3, padding=1), (2, 3, 7, 6)),
    "conv2d_strided": (lambda: nn.Conv2d(3, 2, (3, 2), stride=2, bias=False), (2, 3, 9, 8)),
    "conv1d": (lambda: nn.Conv1d(3, 4, 3, padding=1), (2, 3, 9)),
    "maxpool2d": (lambda: nn.MaxPool2d(2), (2, 3, 8, 6)),
    "avgpool2d": (lambda: nn.AvgPool2d(3, 2, 1), (2, 3, 8, 7)),
    "layernorm": (lambda: nn.LayerNorm(6), (3, 4, 6)),
    "batchnorm1d": (lambda: nn.BatchNorm1d(6), (8, 6)),
    "batchnorm2d": (lambda: nn.BatchNorm2d(3), (4, 3, 5, 5)),
    "groupnorm": (lambda: nn.GroupNorm(2, 4), (2, 4, 5)),
    "rmsnorm": (lambda: nn.RMSNorm(6), (3, 6)),
    "mlp": (lambda: nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(),
                                  nn.Linear(32, 3)), (16, 8)),
    "cnn": (lambda: nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Flatten(), nn.LayerNorm(64), nn.Linear(64, 10)),
            (2, 1, 8, 8)),
    "attention": (lambda: nn.MultiheadAttention(16, 2, batch_first=True), (2, 5, 16)),
    "convtranspose2d": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                                   output_padding=1, groups=2), (2, 4, 5, 4)),
    "convtranspose1d": (lambda: nn.ConvTranspose1d(3, 2, 4, stride=2), (2, 3, 7)),
    "conv2d_depthwise": (lambda: nn.Conv2d(4, 8, 3, padding=1, groups=4), (2, 4, 6, 5)),
    "hooked": (lambda: _hooked(nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))),
               (4, 6)),
}


def _hooked(model):
    """Backward hooks that change gradients: a pre-hook scales grad_output, a full hook
    scales grad_input, a tensor hook on the output clamps."""
    model[2].register_full_backward_pre_hook(lambda m, gout: (gout[0] * 0.5,))
    model[0].register_full_backward_hook(lambda m, gin, gout: (gin[0] * 3.0,))
    model.register_forward_hook(lambda m, args, out: out.register_hook(
        lambda g: g.clamp(-0.3, 0.3)) and None)
    return model


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_cuda(cuda_leg, rng, name):
    make, shape = MODULES[name]
    x = randn(rng, *shape)
    if name == "attention":
        check_module_on_cuda(cuda_leg, lambda: _SelfAttention(make()), x)
    else:
        check_module_on_cuda(cuda_leg, make, x)


class _SelfAttention(nn.Module):
    def __init__(self, attn):
        super().__init__()
        self.attn = attn

    def forward(self, x):
        return self.attn(x, x, x)[0]


def test_embedding_module_cuda(cuda_leg, rng):
    idx = rng.integers(0, 11, (3, 4))
    check_module_on_cuda(cuda_leg, lambda: nn.Embedding(11, 5), idx)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_loss_modules_cuda(cuda_leg, rng, reduction):
    x, tg = randn(rng, 6, 5), rng.integers(0, 5, (6,))
    check_module_on_cuda(cuda_leg, lambda: nn.CrossEntropyLoss(reduction=reduction), x, tg)
    check_module_on_cuda(cuda_leg, lambda: nn.MSELoss(reduction=reduction), x,
                         NoGrad(randn(rng, 6, 5)))


# ---- optimizer steps

OPTIMIZERS = {
    "sgd": lambda p: kiln.optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda p: kiln.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    "sgd_nesterov": lambda p: kiln.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda p: kiln.optim.Adam(p, lr=0.01),
    "adam_wd_amsgrad": lambda p: kiln.optim.Adam(p, lr=0.01, weight_decay=0.1, amsgrad=True),
    "adamw": lambda p: kiln.optim.AdamW(p, lr=0.01, weight_decay=0.05),
    "rmsprop": lambda p: kiln.optim.RMSprop(p, lr=0.01, momentum=0.9, centered=True),
    "adagrad": lambda p: kiln.optim.Adagrad(p, lr=0.1),
    "adadelta": lambda p: kiln.optim.Adadelta(p, lr=1.0),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_optimizer_steps_cuda(cuda_leg, rng, name, dtype):
    params = [randn(rng, 5, 4, dtype=dtype), randn(rng, 4, dtype=dtype),
              randn(rng, 3000, dtype=dtype)]
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    check_optimizer_on_cuda(cuda_leg, OPTIMIZERS[name], *params, **tol)
