"""What bench/gpu_workloads.py's main process and its workers share: the systems and
their labels, the workloads at the GPU sizes, and the one-line error text of a cell."""

import workload_cases  # numpy-free

SYSTEMS = ("kiln_eager", "kiln_traced", "torch_eager", "torch_compile", "torch_compile_ro")
LABELS = {"kiln_eager": "kiln eager", "kiln_traced": "kiln traced", "kiln_warm": "kiln warm cache",
          "torch_eager": "torch eager", "torch_compile": "torch.compile",
          "torch_compile_ro": "torch.compile ro"}
F32 = 4
FIRST_CALLS = 8  # synchronized calls timed one by one (kiln traced compiles after 2, by default)


# ---- the workloads (BENCHMARKS.md's GPU sizes; the functions are cpu_workloads.py's)

def size_label(n):
    return str(n) if n < 1 << 16 else f"2^{n.bit_length() - 1}"


def cases(quick):
    """(workload, size label, input shapes with scales, flops) for each row (GPU sizes)."""
    return workload_cases.cases(
        quick, pointwise=(1 << 12, 1 << 20) if quick else (1 << 12, 1 << 20, 1 << 26),
        sin_cos_n=1 << (20 if quick else 24),
        attention=(2, 8, 256, 64) if quick else (16, 8, 1024, 64), label=size_label)


def first_line(text, limit=200):
    lines = [s.strip() for s in str(text).strip().splitlines() if s.strip()]
    return (lines[0] if lines else "")[:limit]


def error_text(e):
    return first_line(f"{type(e).__name__}: {e}")
