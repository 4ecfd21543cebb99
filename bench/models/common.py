"""Shared by the bench models: deterministic initial weights (numpy, by parameter name
and shape, so kiln and PyTorch start from the same values) and a host-side batch source.

A model module (gpt.py, cnn.py, ...) defines `make(fw, device, size, **options)`, which
returns a case object with:
  step()         one training step (or one inference call) in the framework's idiom,
                 returning what user code keeps (the loss as a float, read every step)
  check_value()  a float to compare across systems (default: the last step's value)
  compile(fn)    optional: wraps the model with fn (torch.compile) the way users do
  model          the framework module
`fw` is the framework module (torch, or kiln used as torch); nothing else differs.
"""

import math

import numpy as np


def init_arrays(model, rule, seed=1234):
    """{name: float32 array} for every parameter of model (tied ones once), drawn from
    rule(name, shape, rng)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, p in model.named_parameters():
        out[name] = np.asarray(rule(name, tuple(p.shape), rng), dtype=np.float32)
    return out


def uniform_fan_in(name, shape, rng):
    """PyTorch's default for Linear/Conv/LSTM: U(-1/sqrt(fan_in), 1/sqrt(fan_in)); norms:
    weight 1, bias 0."""
    if len(shape) == 1 and "norm" in name and name.endswith("weight"):
        return np.ones(shape)
    if len(shape) == 1 and "norm" in name:
        return np.zeros(shape)
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    bound = 1.0 / math.sqrt(max(fan_in, 1))
    return rng.uniform(-bound, bound, shape)


def load_arrays(fw, model, arrays):
    """Copies arrays into model's parameters in place (before model.to(device))."""
    with fw.no_grad():
        for name, p in model.named_parameters():
            p.copy_(fw.from_numpy(arrays[name]))


def weights_like(fw, model, rule, seed=1234):
    """init_arrays then load_arrays: model starts from the same values in every system."""
    arrays = init_arrays(model, rule, seed)
    load_arrays(fw, model, arrays)
    return arrays
