"""The models of bench/models are right: each runs a few steps under kiln (tracing on,
so the later steps replay compiled traces) and under PyTorch from the same weights, on the
same batches, with dropout off, and the losses (the inference loop's outputs) agree step
by step. Quick: the CPU sizes, 4 steps each (a few seconds in all)."""

import os
import sys

import numpy as np
import pytest

import kiln
from helpers import requires_torch, torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                                "models"))
import compat  # noqa: E402
import block  # noqa: E402
import cnn  # noqa: E402
import gpt  # noqa: E402
import lstm  # noqa: E402

pytestmark = requires_torch
STEPS = 4


def _losses(fw, module, seed, **options):
    compat.prepare(fw)
    case = module.make(fw, "cpu", "cpu", seed=seed, **options)
    return case, [case.step() for _ in range(STEPS)]


def _numpy_batches(seed):
    """randint's stand-in for both frameworks: the same offsets from a numpy Generator."""
    rng = np.random.default_rng(seed)
    return lambda high, n: [int(i) for i in rng.integers(0, high, n)]


def test_gpt_matches_torch(seed):
    _, ours = _losses(kiln, gpt, seed, dropout=0.0, batch_index=_numpy_batches(seed))
    _, theirs = _losses(torch, gpt, seed, dropout=0.0, batch_index=_numpy_batches(seed))
    assert ours[0] == pytest.approx(np.log(65), rel=0.05)  # an untrained model's loss
    np.testing.assert_allclose(ours, theirs, rtol=2e-4)


def test_cnn_matches_torch(seed):
    _, ours = _losses(kiln, cnn, seed, dropout=False)
    _, theirs = _losses(torch, cnn, seed, dropout=False)
    np.testing.assert_allclose(ours, theirs, rtol=2e-4)


def test_block_inference_matches_torch(seed):
    ours, _ = _losses(kiln, block, seed)
    theirs, _ = _losses(torch, block, seed)
    np.testing.assert_allclose(ours.out.numpy(), theirs.out.numpy(), rtol=1e-4, atol=1e-5)


def test_lstm_matches_torch(seed):
    if not hasattr(kiln.nn, "LSTM"):
        pytest.skip("kiln.nn.LSTM is missing (it lands with the api branch, issue 14)")
    _, ours = _losses(kiln, lstm, seed, dropout=0.0)
    _, theirs = _losses(torch, lstm, seed, dropout=0.0)
    np.testing.assert_allclose(ours, theirs, rtol=2e-4)


def test_missing_features_are_named():
    """A model that needs what a framework lacks fails with the feature's name."""
    class Bare:
        __name__ = "bare"

    with pytest.raises(compat.Missing, match="nn.LSTM"):
        compat.require(Bare(), Bare, "LSTM", "nn.LSTM")
