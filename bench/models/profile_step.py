"""Where one model's training step spends its time: a per-op (or per-kernel) table of one
framework's steady-state steps, for finding what to speed up (not a comparison table:
run.py is that).

    python3 bench/models/profile_step.py --fw kiln --mode traced --device cuda --only gpt
    python3 bench/models/profile_step.py --fw torch --device cuda --only gpt

kiln: kiln.profile() events grouped by name (eager ops, replays of compiled traces,
compiles, breaks), with GPU time from CUDA events where the work ran on the GPU.
torch: torch.profiler's key_averages() sorted by device time. Prints the step's wall
time too; the steps' results are held (the loss is read every step by the model's loop).
"""

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from run import MODELS, import_framework  # noqa: E402


def kiln_table(fw, case, steps, sync, top):
    with fw.profile() as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            case.step()
        sync()
        wall = (time.perf_counter() - t0) * 1e3 / steps
    rows = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for e in prof.events:
        r = rows[(e["kind"], e["name"])]
        r[0] += 1
        r[1] += e.get("dur_us", 0.0)
        r[2] += e.get("gpu_dur_us", 0.0) or 0.0
    gpu_total = sum(r[2] for r in rows.values())
    host_total = sum(r[1] for (k, _), r in rows.items() if k in ("op", "replay"))
    print(f"wall {wall:.2f} ms/step; GPU busy (events) {gpu_total / 1e3 / steps:.2f} ms/step; "
          f"host in ops+replays {host_total / 1e3 / steps:.2f} ms/step")
    print(f"{'kind':<12}{'name':<44}{'count/step':>11}{'host ms':>10}{'gpu ms':>10}")
    for (kind, name), (n, host, gpu) in sorted(rows.items(), key=lambda kv: -max(kv[1][2],
                                                                                 kv[1][1]))[:top]:
        print(f"{kind:<12}{name[:43]:<44}{n / steps:>11.1f}{host / 1e3 / steps:>10.3f}"
              f"{gpu / 1e3 / steps:>10.3f}")


def torch_table(fw, case, steps, sync, top, device):
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            case.step()
        sync()
        wall = (time.perf_counter() - t0) * 1e3 / steps
    print(f"wall {wall:.2f} ms/step (under the profiler)")
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    try:
        print(prof.key_averages().table(sort_by=key, row_limit=top))
    except Exception:  # newer torch: "device" in place of "cuda"
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=top))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fw", default="kiln", choices=("kiln", "torch"))
    ap.add_argument("--mode", default="traced", choices=("traced", "eager"))
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--only", default="gpt")
    ap.add_argument("--size", default="")
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--explain", action="store_true",
                    help="kiln: print explain() at the end (without its guard and op lines)")
    ap.add_argument("--amp", default="", choices=("", "bf16", "fp16"),
                    help="gpt's forward under autocast to this dtype (as run.py --amp)")
    args = ap.parse_args()
    if args.fw == "kiln" and args.mode == "eager":
        os.environ["KILN_TRACE"] = "0"
    import compat

    fw, sync = import_framework("kiln_" + args.mode if args.fw == "kiln" else "torch_eager",
                                args.device)
    compat.prepare(fw)
    module = __import__(MODELS[args.only][0])
    case = module.make(fw, args.device, args.size or ("gpu" if args.device == "cuda" else "cpu"),
                       **({"amp": args.amp} if args.amp else {}))
    for _ in range(args.warmup):
        case.step()
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        case.step()
    sync()
    print(f"== {args.fw} {args.mode if args.fw == 'kiln' else 'eager'} {args.only} "
          f"{args.device}: {(time.perf_counter() - t0) * 1e3 / args.steps:.2f} ms/step unprofiled")
    if args.fw == "kiln":
        kiln_table(fw, case, args.steps, sync, args.top)
        if args.explain:
            text = "\n".join(line for line in str(fw.explain()).splitlines()
                             if not line.lstrip().startswith(("guard in", "ops:")))
            print(text if len(text) < 20000 else text[:10000] + "\n...\n" + text[-10000:])
    else:
        torch_table(fw, case, args.steps, sync, args.top, args.device)


if __name__ == "__main__":
    main()
