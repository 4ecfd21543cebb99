"""Do kiln's replay modes agree on a real model? Trains one bench/models model for --steps
steps (same seed, same batches, same dropout draws) as kiln eager, kiln traced with
pipelined replay off (KILN_PIPELINED_REPLAY=0) and kiln traced with it on (the default),
each in its own process, and compares the losses step by step: pipelined replay must give
what whole-trace replay gives (the same kernels in the same order: equal up to rounding
in the reductions' order, which does not change here), and both what eager gives within
the tolerance of fused kernels. A check for the GPU, where KILN_VERIFY=1 (which turns
pipelined replay off) cannot cover it.

    python3 bench/models/replay_agreement.py --device cuda --only gpt --steps 40
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

MODES = {"eager": {"KILN_TRACE": "0"}, "traced_whole": {"KILN_PIPELINED_REPLAY": "0"},
         "traced_pipelined": {}}


def worker(args):
    from run import MODELS, import_framework

    fw, sync = import_framework("kiln_traced", args.device)
    import compat

    compat.prepare(fw)
    module = __import__(MODELS[args.only][0])
    case = module.make(fw, args.device, args.size or ("gpu" if args.device == "cuda" else "cpu"))
    losses = [float(case.step()) for _ in range(args.steps)]
    sync()
    print("LOSSES " + json.dumps(losses))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--only", default="gpt")
    ap.add_argument("--size", default="")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    losses = {}
    for mode, extra in MODES.items():
        env = dict(os.environ, **extra)
        env.pop("KILN_VERIFY", None)
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", "--device",
                            args.device, "--only", args.only, "--size", args.size, "--steps",
                            str(args.steps)], capture_output=True, text=True, env=env)
        line = [x for x in p.stdout.splitlines() if x.startswith("LOSSES ")]
        if p.returncode != 0 or not line:
            print(f"{mode}: worker failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
            return 1
        losses[mode] = json.loads(line[0][7:])

    def worst(a, b):
        return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(losses[a], losses[b]))

    pipe_vs_whole = worst("traced_pipelined", "traced_whole")
    whole_vs_eager = worst("traced_whole", "eager")
    pipe_vs_eager = worst("traced_pipelined", "eager")
    print(f"{args.only} on {args.device}, {args.steps} steps: largest relative loss difference "
          f"pipelined vs whole-trace replay {pipe_vs_whole:.2e}, whole-trace vs eager "
          f"{whole_vs_eager:.2e}, pipelined vs eager {pipe_vs_eager:.2e}; last losses "
          + ", ".join(f"{m} {v[-1]:.6f}" for m, v in losses.items()))
    ok = pipe_vs_whole <= 1e-5 and whole_vs_eager <= 1e-3 and pipe_vs_eager <= 1e-3
    print("agree" if ok else "DISAGREE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main() or 0)
