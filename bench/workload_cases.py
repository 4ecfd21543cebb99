"""The benchmark rows of shared/BENCHMARKS.md, shared by cpu_workloads.py and
gpu_workloads.py (numpy-free, so gpu_workloads' main process can plan without it): each
row is (workload, size label, input shapes with scales, flops)."""


def pow2_label(n):
    return f"2^{n.bit_length() - 1}"


def cases(quick, pointwise, sin_cos_n, attention, label=pow2_label):
    """pointwise: the sizes of add_relu_mul and gelu_tanh; sin_cos_n: its size;
    attention: its (batch, heads, tokens, dim); label: a pointwise size's name."""
    rows = []
    for n in pointwise:
        rows.append(("add_relu_mul", label(n), [(n,), (n,), (n,)], 0))
        rows.append(("gelu_tanh", label(n), [(n,)], 0))
    rows.append(("sin_cos", label(sin_cos_n), [(sin_cos_n,), (sin_cos_n,)], 0))
    rows.append(("softmax", "4096x1024", [(4096, 1024)], 0))
    rows.append(("softmax", "32x128", [(32, 128)], 0))
    rows.append(("layernorm", "4096x1024", [(4096, 1024), (1024,), (1024,)], 0))
    H = 1024
    for B in ((128,) if quick else (128, 4096)):
        shapes = [(B, 1), (1, H), (H,), ((H, H), 1 / 32), (H,), ((H, 1), 1 / 32), (1,)]
        rows.append(("mlp3", f"batch {B}", shapes, 2 * B * (H + H * H + H)))
    B, Hh = 64, 256
    rows.append(("lstm_cell", f"{B}x{Hh}",
                 [(B, Hh), (B, Hh), (B, Hh), ((Hh, 4 * Hh), 1 / 16), ((Hh, 4 * Hh), 1 / 16),
                  (4 * Hh,)], 2 * 2 * B * Hh * 4 * Hh))
    a = attention
    rows.append(("attention", "x".join(map(str, a)), [a, a, a],
                 2 * 2 * a[0] * a[1] * a[2] * a[2] * a[3]))
    return rows
