#!/usr/bin/env python3
"""Instructions per lazily replayed op from Python, under callgrind (issue 21 item 4).

The loop body of bench/py_overhead.py's "N-op body" lines (N distinct tiny ops on
1-element float32 tensors, each its own site) is warmed up until the tracer replays it
lazily, then run twice more, short and long, between two marker calls: callgrind zeroes
its counters at os.getppid() and dumps them at os.getpgrp(), so each dump holds one
measured loop. Instructions per op = (long - short) / (ops of long - ops of short): the
fixed cost of the markers and the loop's entry cancels.

    PYTHONPATH=build/python /usr/bin/python3 bench/callgrind_py_op.py
    ... bench/callgrind_py_op.py --body 32 --short 100 --long 600 --keep /tmp/cg

--keep DIR keeps the callgrind dumps (callgrind_annotate --inclusive=yes DIR/<dump>.2
shows where the long loop's instructions go). The tracer is checked to have replayed
every measured op (no recording); the warm start (KILN_WARM_START) is off, so a run does
not depend on the trace cache's state.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_overhead import body_fn  # noqa: E402


def inner(ops, short, long):
    import kiln

    x = kiln.ones(1, dtype=kiln.float32)
    w = kiln.full((1,), 0.5, dtype=kiln.float32)
    body = body_fn(ops, "callgrind")

    def loop(n):
        for _ in range(n):
            body(x, w)

    loop(300)
    kiln.synchronize_compiles()
    loop(300)
    before = kiln.explain()
    # No host read before the measured loops: they go on from the replaying loop.
    os.getppid()
    loop(short)
    os.getpgrp()
    os.getppid()
    loop(long)
    os.getpgrp()
    after = kiln.explain()
    replayed = after.ops_replayed - before.ops_replayed
    recorded = after.ops_recorded - before.ops_recorded
    print(f"measured ops replayed {replayed}, recorded {recorded}", file=sys.stderr)
    if recorded or replayed < (short + long) * ops - ops:
        sys.exit("the measured loops were not all replayed lazily")


def totals(path):
    with open(path) as f:
        for line in f:
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--body", type=int, default=8, help="ops in the loop body")
    ap.add_argument("--short", type=int, default=100, help="bodies in the short loop")
    ap.add_argument("--long", type=int, default=600, help="bodies in the long loop")
    ap.add_argument("--keep", help="keep the callgrind dumps in this directory")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        inner(args.body, args.short, args.long)
        return

    out_dir = args.keep or tempfile.mkdtemp(prefix="kiln_callgrind_")
    os.makedirs(out_dir, exist_ok=True)
    for old in glob.glob(os.path.join(out_dir, "callgrind.out.py_op*")):
        os.remove(old)
    prefix = os.path.join(out_dir, "callgrind.out.py_op")
    env = dict(os.environ, KILN_WARM_START="0")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={prefix}",
           "--zero-before=getppid", "--dump-before=getpgrp", sys.executable,
           os.path.abspath(__file__), "--inner", "--body", str(args.body),
           "--short", str(args.short), "--long", str(args.long)]
    run = subprocess.run(cmd, env=env, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stderr)
        sys.exit(run.returncode)
    dumps = sorted(glob.glob(prefix + ".*"), key=lambda p: int(p.rsplit(".", 1)[1]))
    if len(dumps) < 2:
        sys.exit(f"expected two dumps, found {dumps}")
    short_ir, long_ir = totals(dumps[-2]), totals(dumps[-1])
    ops = (args.long - args.short) * args.body
    per_op = (long_ir - short_ir) / ops
    print(f"callgrind_py_op {args.body}-op body: {per_op:.0f} instructions per lazily replayed op "
          f"[({long_ir} - {short_ir}) / {ops} ops; short {args.short}, long {args.long} bodies; "
          f"python {sys.version_info.major}.{sys.version_info.minor}]")
    if args.keep:
        print(f"dumps: {dumps[-2]} (short), {dumps[-1]} (long)")


if __name__ == "__main__":
    main()
