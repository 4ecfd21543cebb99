#!/usr/bin/env python3
"""Prints a compact table from Google Benchmark JSON files (--benchmark_out).

    bench_table.py overhead.json bandwidth.json

One row per benchmark: the median when repetitions were run, time per call in a
readable unit, GB/s where the benchmark reports it, and for bandwidth rows the share
of the best copy bandwidth measured in the same file (the floor). Standard library
only, so it runs under any python3.
"""
import json
import sys

UNIT_TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def fmt_time(ns):
    if ns < 1e3:
        return f"{ns:.1f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.2f} us"
    return f"{ns / 1e6:.2f} ms"


def size_key(row):
    parts = row.get("run_name", row["name"]).split("/")
    return parts[1] if len(parts) > 1 and parts[1].isdigit() else ""


def rows_of(path):
    with open(path) as f:
        data = json.load(f)
    rows, order = {}, []
    for b in data.get("benchmarks", []):
        name = b.get("run_name", b["name"])
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        if name not in rows:
            order.append(name)
        # keep the median if there is one, else the last plain iteration row
        if b.get("run_type") == "aggregate" or name not in rows or "median" not in rows[name]:
            entry = dict(b)
            if b.get("run_type") == "aggregate":
                entry["median"] = True
            rows[name] = entry
    return data.get("context", {}), [rows[n] for n in order]


def main(paths):
    for path in paths:
        try:
            ctx, rows = rows_of(path)
        except (OSError, ValueError) as e:
            print(f"{path}: unreadable ({e})")
            continue
        extra = ", ".join(f"{k}={ctx[k]}" for k in ("kiln_threads", "kiln_gpu", "elements")
                          if k in ctx)
        print(f"== {path.rsplit('/', 1)[-1]}  ({ctx.get('host_name', '?')}, "
              f"{ctx.get('num_cpus', '?')} cpus{', ' + extra if extra else ''})")
        # The floor: the best copy bandwidth measured at the same size (the benchmark's
        # first argument, e.g. BM_kiln_add_out/24/real_time: 2^24 elements).
        floors = {}
        for r in rows:
            if "memcpy" in r.get("run_name", r["name"]) and "GB/s" in r:
                key = size_key(r)
                floors[key] = max(floors.get(key, 0), r["GB/s"])
        width = max((len(r.get("run_name", r["name"])) for r in rows), default=10)
        for r in rows:
            name = r.get("run_name", r["name"])
            if r.get("error_occurred"):
                print(f"  {name:<{width}}  skipped: {r.get('error_message', '')}")
                continue
            ns = r["real_time"] * UNIT_TO_NS[r.get("time_unit", "ns")]
            line = f"  {name:<{width}}  {fmt_time(ns):>10}"
            if "per_op" in r:  # seconds per op (benchmark::Counter::kInvert)
                line += f"  ({fmt_time(r['per_op'] * 1e9)}/op)"
            if "GB/s" in r:
                line += f"  {r['GB/s']:7.2f} GB/s"
                floor = floors.get(size_key(r))
                if floor:
                    line += f"  {100 * r['GB/s'] / floor:5.0f}% of copy"
            print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
