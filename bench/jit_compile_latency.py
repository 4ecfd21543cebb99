"""First-compile latency of the CPU JIT: a 10-op fused trace (pointwise chain and a row
softmax), cold (empty kernel cache) and warm (a new process, disk cache filled).

    PYTHONPATH=build/python python3 bench/jit_compile_latency.py        # runs both phases
Prints compile_ms from kiln.explain() per trace. Timing is the recorder's compile time:
fusion planning, lowering, LLVM (or the disk cache) and linking.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np


def child():
    import kiln

    rng = np.random.default_rng(0)
    x = kiln.tensor(rng.standard_normal((256, 512)).astype(np.float32))
    b = kiln.tensor(rng.standard_normal(512).astype(np.float32))

    def chain10(x, b):  # ten pointwise ops
        y = (x + b) * 0.5
        y = kiln.tanh(y) - 0.25 * x
        y = kiln.exp(-y * y) + kiln.sigmoid(x)
        return kiln.relu(y) * 3.0 - 1.0

    def softmax(x):
        e = kiln.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    f, g = kiln.compile(chain10), kiln.compile(softmax)
    for _ in range(4):
        f(x, b)
        g(x)
    for t in kiln.explain().traces:
        print(f"{len(t['ops']):3d} ops -> {t['kernels']} kernel(s): {t['compile_ms']:.2f} ms")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child()
        sys.exit(0)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, KILN_CACHE_DIR=cache)
        for phase in ("cold (empty cache)", "warm (new process, disk cache)"):
            out = subprocess.run([sys.executable, __file__, "child"], env=env, check=True,
                                 capture_output=True, text=True).stdout
            print(f"{phase}:\n{out}")
