"""Turns bench/bench_cpu_gemm.sh's output into a markdown table: per shape and library,
the best per-call microseconds over all rounds (the machine is shared, so the best loop
is the figure least touched by other processes), one table per thread count.

    python3 bench/bench_cpu_gemm_table.py raw.txt [best|cpu]

"cpu" tabulates process CPU time per call instead: on a loaded machine the fair figure
for 1-thread runs (it counts the time each library spends computing, not waiting).
"""
import re
import sys


FIELD = {"best": r"(.*?)\s+[\d.]+ us .* best\s+([\d.]+) us",
         "cpu": r"(.*?)\s+[\d.]+ us .* cpu\s+([\d.]+) us"}


def main(path, field="best"):
    best = {}  # (threads, lib) -> {shape: us}
    shapes, libs = [], []
    key = None
    for line in open(path):
        m = re.match(r"== (\S+), (\d+) thread", line)
        if m:
            key = (m[2], m[1])
            if m[1] not in libs:
                libs.append(m[1])
            continue
        m = re.match(FIELD[field], line)
        if m and key:
            shape = m[1].strip()
            if shape not in shapes:
                shapes.append(shape)
            cell = best.setdefault(key, {})
            cell[shape] = min(cell.get(shape, float("inf")), float(m[2]))
    for threads in sorted({k[0] for k in best}):
        cols = [lib for lib in libs if (threads, lib) in best]
        what = "wall time, best loop" if field == "best" else "process CPU time, median loop"
        print(f"\n{threads} thread(s), per-call us ({what}), best over rounds (lower is better; "
              "* marks the fastest)\n")
        print("| shape | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for s in shapes:
            vals = [best[(threads, c)].get(s) for c in cols]
            lo = min(v for v in vals if v is not None)
            cells = ["n/a" if v is None else f"{v:.0f}{'*' if v == lo else ''}" for v in vals]
            print(f"| {s} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "best")
