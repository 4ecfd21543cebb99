"""The tables and cell notes of bench/gpu_workloads.py's report."""

import platform

from gpu_common import LABELS, first_line


def fmt_us(us):
    return f"{us:.3g}" if us < 100 else f"{us:,.0f}"


def fmt_ms(ms):
    return f"{ms:.3g}" if ms < 1000 else f"{ms:,.0f}"


def cell_error(res):
    return "error: " + first_line(res["error"], 60).replace("|", "/")


def main_table(rows, names):
    base = "kiln_traced" if "kiln_traced" in names else names[0]
    others = [n for n in names if n != base]
    head = ["workload", "size", "floor us", f"{LABELS[base]} us"]
    if base == "kiln_traced":
        head += ["% floor", "kernels", "backend"]
    head += [LABELS[n] for n in others]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        b = r["results"].get(base, {})
        cells = [r["workload"], r["size"], fmt_us(r["floor_us"]) if r["floor_us"] else "n/a"]
        cells.append(fmt_us(b["us"]) if "us" in b else cell_error(b) if "error" in b else "n/a")
        if base == "kiln_traced":
            cells.append(f"{100 * r['floor_us'] / b['us']:.0f}%" if "us" in b and r["floor_us"]
                         else "")
            hot = "us" in b and b.get("traces")
            cells.append(str(b["kernels"]) if hot else "eager" if "us" in b else "")
            cells.append(",".join(b.get("backends", [])) if hot else "")
        for n in others:
            s = r["results"].get(n, {})
            if "us" in s:
                ratio = f" ({s['us'] / b['us']:.2f}x)" if "us" in b else ""
                cells.append(fmt_us(s["us"]) + ratio)
            else:
                cells.append(cell_error(s) if "error" in s else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def first_call_table(rows, names):
    cols = [n for n in ("kiln_traced", "kiln_warm", "torch_compile", "torch_compile_ro")
            if n in names]
    if not cols:
        return ""
    heads = {"kiln_traced": "kiln traced cold ms (compile ms)",
             "kiln_warm": "kiln traced warm ms (compile ms)",
             "torch_compile": "torch.compile first call ms",
             "torch_compile_ro": "torch.compile ro first call ms"}
    head = ["workload", "size"] + [heads[n] for n in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["workload"], r["size"]]
        for n in cols:
            res = r["results"].get(n, {})
            if n.startswith("kiln") and "compile_call_ms" in res:
                cells.append(f"{fmt_ms(res['compile_call_ms'])} ({fmt_ms(res['compile_ms'])})"
                             + (" (then: error)" if "error" in res else ""))
            elif n.startswith("kiln") and "first_calls_ms" in res and "error" not in res:
                cells.append("no trace compiled")
            elif not n.startswith("kiln") and "first_call_s" in res:
                cells.append(fmt_ms(res["first_call_s"] * 1e3) + (" (then: error)" if "error" in res
                                                                  else ""))
            else:
                cells.append(cell_error(res) if "error" in res else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cell_notes(rows, names, most=12):
    """Notes on cells: long errors, kiln traced running eagerly, graph breaks, JIT notes
    (at most `most` lines; every one is in the JSON)."""
    notes = []
    for r in rows:
        for n in names:
            res, where = r["results"].get(n, {}), f"{r['workload']} {r['size']}, {LABELS[n]}"
            if "error" in res and len(res["error"]) > 60:
                notes.append(f"{where}: {res['error']}")
            if n == "kiln_traced" and "us" in res and not res.get("traces"):
                notes.append(f"{where}: no compiled trace replayed (ran eagerly)")
            if n == "kiln_traced" and res.get("graph_breaks"):
                notes.append(f"{where}: {res['graph_breaks']} graph break site(s)")
            if n == "kiln_traced":
                for note in sorted(set(res.get("jit_notes", [])))[:3]:
                    notes.append(f"{where}: jit note: {first_line(note, 160)}")
    return notes[:most] + ([f"({len(notes) - most} more notes in the JSON)"]
                           if len(notes) > most else [])


def device_line(probes, device):
    names = [f"{lib}.cuda.get_device_name(): {info['device_name']}"
             for lib, info in probes.items() if info.get("device_name")]
    if device == "cpu":
        names.insert(0, f"the CPU ({platform.processor() or platform.machine()}, --device cpu)")
    return "device: " + ("; ".join(names) if names else "no CUDA device")
