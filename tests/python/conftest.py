"""Shared fixtures for the kiln Python suite.

Oracles are numpy and PyTorch CPU on fresh random inputs. Every test that draws random
numbers takes the `rng` fixture: a numpy Generator seeded from the OS, whose seed is
printed (shown by pytest on failure) and can be pinned with KILN_TEST_SEED=<n>.

kiln is imported from PYTHONPATH (ctest sets it to <build>/python); run by hand, this
file falls back to the first build*/python folder of the checkout that has the module.
"""

import glob
import os
import secrets
import sys

import numpy as np
import pytest

# The tracer's speed check (tracer/speed_check.h) pinned off: whether a trace keeps
# replaying must not depend on the machine's load. Tests of the check turn it on.
os.environ.setdefault("KILN_SPEED_CHECK", "0")
# Compiles on the spot (KILN_COMPILE_SYNC=1; the default is in the background): tests
# count compiles and replays after a few iterations. test_background_compile.py turns the
# background mode on (its subprocess runs with the default).
os.environ.setdefault("KILN_COMPILE_SYNC", "1")
# No warm starts (tracer/warm_start.h): a trace stored by an earlier test process would
# replay from the first call and change the counts tests expect. test_warm_start.py runs
# its subprocesses with them on, in a cache directory of their own.
os.environ.setdefault("KILN_WARM_START", "0")

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import kiln  # noqa: F401
except ImportError:
    for cand in sorted(glob.glob(os.path.join(_ROOT, "build*", "python"))):
        if glob.glob(os.path.join(cand, "kiln", "_kiln*.so")):
            sys.path.insert(0, cand)
            break
    import kiln  # noqa: F401


@pytest.fixture
def seed():
    value = int(os.environ.get("KILN_TEST_SEED", secrets.randbits(32)))
    print(f"[kiln test] random seed = {value} (rerun with KILN_TEST_SEED={value})")
    return value


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)


@pytest.fixture
def fresh_tracer():
    """A fresh tracer for each test (warmup 2, no verification, tracing on, compiles on
    the spot so that the walk after warmup replays), and the settings it found restored
    after. Files use it with `pytestmark = pytest.mark.usefixtures("fresh_tracer")`."""
    import kiln

    kiln.reset()
    previous = kiln.set_config(warmup=2, verify=False, background_compile=False)
    kiln.set_tracing(True)
    yield
    kiln.reset()
    kiln.set_config(**previous)
    kiln.set_tracing(True)


@pytest.fixture(params=[pytest.param("cuda", id="cuda")])
def cuda_leg(request):
    """The device of a CUDA leg (helpers.check_on_cuda): "cuda", skipped where
    kiln.cuda.is_available() is false. KILN_TEST_CUDA_LEG_DEVICE=cpu runs the legs on
    the CPU instead (a sanity check of the comparison machinery without a GPU)."""
    import kiln
    from helpers import CUDA_LEG_DEVICE

    if CUDA_LEG_DEVICE == "cuda" and not kiln.cuda.is_available():
        pytest.skip("CUDA leg: kiln.cuda.is_available() is false (no GPU, or kiln built "
                    "without CUDA); KILN_TEST_CUDA_LEG_DEVICE=cpu runs it on the CPU")
    assert CUDA_LEG_DEVICE in ("cuda", "cpu"), \
        f"KILN_TEST_CUDA_LEG_DEVICE={CUDA_LEG_DEVICE!r}: expected cuda or cpu"
    return CUDA_LEG_DEVICE


def pytest_report_header(config):
    import kiln
    from helpers import CUDA_LEG_DEVICE

    if CUDA_LEG_DEVICE != "cuda":
        return (f"kiln CUDA legs: run on {CUDA_LEG_DEVICE!r} (KILN_TEST_CUDA_LEG_DEVICE), "
                f"not on the GPU")
    return f"kiln CUDA legs: {'on the GPU' if kiln.cuda.is_available() else 'skipped (no GPU)'}"
