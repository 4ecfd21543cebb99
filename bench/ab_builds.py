#!/usr/bin/env python3
"""A/B of two kiln builds, interleaved in one run: the same workload script run
alternately against build A (before a change) and build B (after it), so that the
noise of a shared machine falls on both alike.

Each round runs the script once per build (the order alternates between rounds: AB,
BA, AB, ...) with that build's environment and arguments, reads the --json file the
script writes (bench/cpu_workloads.py and bench/gpu_workloads.py both do), and keeps
every kiln cell's per-call time. The table gives, per workload, size and kiln system,
the median over rounds of A and of B, B/A, and flags cells where B is more than
--threshold slower (5% by default: issue 16's bar).

    # CPU, here: build A in another worktree, B in this one
    /usr/bin/python3 bench/ab_builds.py --rounds 3 \\
        --a-env PYTHONPATH=/work/wt-base/build/python --b-env PYTHONPATH=build/python \\
        -- bench/cpu_workloads.py --systems kiln_eager,kiln_traced

    # GPU (scripts/gpu_run.sh's ab step): two kiln interpreters
    python3 bench/ab_builds.py --a-args "--kiln-python A.sh" --b-args "--kiln-python B.sh" \\
        -- bench/gpu_workloads.py --systems kiln_eager,kiln_traced

Prints a markdown table; --json writes it with every round's figures.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile


def parse_env(items):
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"ab_builds: --a-env/--b-env take KEY=VALUE, got {item!r}")
        env[key] = value
    return env


def run_once(script_args, env_extra, extra_args, python):
    with tempfile.TemporaryDirectory(prefix="kiln-ab-") as tmp:
        out = os.path.join(tmp, "ab.json")
        cmd = [python] + script_args + extra_args + ["--json", out]
        env = dict(os.environ, **env_extra)
        rc = subprocess.call(cmd, env=env, stdout=subprocess.DEVNULL)
        try:
            with open(out) as f:
                return json.load(f)
        except (OSError, ValueError):
            print(f"ab_builds: run failed (exit {rc}): {shlex.join(cmd)}", file=sys.stderr)
            return None


def cells(result):
    """{(workload, size, system): us} for every kiln cell that has a time."""
    found = {}
    for row in (result or {}).get("rows", []):
        for system, cell in row.get("results", {}).items():
            if system.startswith("kiln") and isinstance(cell, dict) and "us" in cell:
                found[(row["workload"], str(row["size"]), system)] = cell["us"]
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="runs per build (default 3)")
    p.add_argument("--a-env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--b-env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--a-args", default="", help="extra arguments for build A's runs")
    p.add_argument("--b-args", default="", help="extra arguments for build B's runs")
    p.add_argument("--python", default=sys.executable, help="interpreter for the script")
    p.add_argument("--threshold", type=float, default=0.05, help="flag B/A above 1 + this")
    p.add_argument("--json", default="", help="write the table and all rounds here")
    p.add_argument("script", nargs=argparse.REMAINDER, help="-- the workload script and its args")
    args = p.parse_args()
    script = [a for a in args.script if a != "--"] if args.script[:1] == ["--"] else args.script
    if not script:
        p.error("give the workload script after --")
    builds = {
        "A": (parse_env(args.a_env), shlex.split(args.a_args)),
        "B": (parse_env(args.b_env), shlex.split(args.b_args)),
    }
    figures = {"A": [], "B": []}
    for r in range(args.rounds):
        order = ("A", "B") if r % 2 == 0 else ("B", "A")
        for name in order:
            env, extra = builds[name]
            result = run_once(script, env, extra, args.python)
            figures[name].append(cells(result))
            print(f"ab_builds: round {r + 1}/{args.rounds} build {name}: "
                  f"{len(figures[name][-1])} kiln cells", file=sys.stderr, flush=True)

    keys = sorted(set().union(*figures["A"], *figures["B"]))
    rows, worst = [], 0.0
    for key in keys:
        a = [f[key] for f in figures["A"] if key in f]
        b = [f[key] for f in figures["B"] if key in f]
        if not a or not b:
            rows.append(dict(workload=key[0], size=key[1], system=key[2], a_us=None, b_us=None,
                             ratio=None, note="missing in " + ("A" if not a else "B")))
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        ratio = mb / ma
        worst = max(worst, ratio)
        rows.append(dict(workload=key[0], size=key[1], system=key[2], a_us=ma, b_us=mb,
                         ratio=round(ratio, 3), a_rounds=a, b_rounds=b,
                         note="SLOWER" if ratio > 1 + args.threshold else ""))

    print(f"\n# A/B, {args.rounds} interleaved rounds per build; medians over rounds, us per call\n")
    print("| workload | size | system | A (before) | B (after) | B/A | |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["ratio"] is None:
            print(f"| {r['workload']} | {r['size']} | {r['system']} | - | - | - | {r['note']} |")
        else:
            print(f"| {r['workload']} | {r['size']} | {r['system']} | {r['a_us']:.1f} | "
                  f"{r['b_us']:.1f} | {r['ratio']:.3f} | {r['note']} |")
    slower = [r for r in rows if r["note"] == "SLOWER"]
    print(f"\nworst B/A {worst:.3f}; {len(slower)} of {len(rows)} cells more than "
          f"{args.threshold:.0%} slower")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rounds=args.rounds, script=script, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
