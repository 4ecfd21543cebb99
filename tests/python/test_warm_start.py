"""Warm starts (tracer/warm_start.h): a second process replays the traces a first one
compiled from its first iteration, and the footguns: a changed program must not replay a
stale trace, a corrupted, tampered, untrusted or foreign-build file is refused with a
clear log and the run stays right, two processes may write the cache at once.

Each case runs the workload below in subprocesses with warm starts on and a cache
directory of its own (the suite pins KILN_WARM_START=0, conftest.py). Values are checked
against float64 numpy in the subprocess, on random inputs drawn from the test's seed."""

import json
import os
import struct
import subprocess
import sys

import pytest

WORKLOAD = r'''
import json, sys
import numpy as np
import kiln

seed, mode, iters = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(seed)
rows = 24 if mode == "wide" else 16
W = rng.standard_normal((64, 32)).astype(np.float32)
b = rng.standard_normal(32).astype(np.float32)
x = rng.standard_normal((rows, 64)).astype(np.float32)
kW, kb, kx = kiln.tensor(W), kiln.tensor(b), kiln.tensor(x)


def act(h):
    return h.tanh() if mode == "tanh" else h.relu()


def reference(s):
    h = (x.astype(np.float64) * s) @ W.astype(np.float64) + b
    h = np.tanh(h) if mode == "tanh" else np.maximum(h, 0)
    return (h * h).sum(axis=1) * 0.5


def loop():
    recorded, worst = [], 0.0
    for i in range(iters):
        before = kiln.explain().ops_recorded
        s = 1.0 + 0.25 * i
        h = act(kx * s @ kW + kb)
        y = (h * h).sum(dim=1) * 0.5
        got = y.numpy()  # a host read: each iteration is one trace
        recorded.append(kiln.explain().ops_recorded - before)
        ref = reference(s)
        worst = max(worst, float(np.max(np.abs(got - ref) / (1e-3 + np.abs(ref)))))
    return recorded, worst


recorded, worst = loop()
ex = kiln.explain()
print(json.dumps({"recorded": recorded, "worst": worst, "loaded": ex.stored_loaded,
                  "refused": ex.stored_refused, "traces": len(ex.traces)}))
'''


def run(tmp_path, cache, seed, mode="relu", iters=6, extra_env=None, wait=True):
    script = tmp_path / "workload.py"
    if not script.exists():
        script.write_text(WORKLOAD)
    env = dict(os.environ)
    env.update({"KILN_WARM_START": "1", "KILN_CACHE_DIR": str(cache), "KILN_COMPILE_SYNC": "1"})
    env.pop("KILN_LOGS", None)
    env.pop("KILN_TRACE", None)  # the suite's eager run (KILN_TRACE=0): these need the tracer
    env.update(extra_env or {})
    proc = subprocess.Popen([sys.executable, str(script), str(seed), mode, str(iters)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return finish(proc) if wait else proc


def finish(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    result["stderr"] = err
    assert result["worst"] < 1e-4, result  # float32 against float64
    return result


def trace_files(cache):
    d = cache / "traces"
    return sorted(p for p in d.iterdir() if p.name.endswith(".bin")) if d.exists() else []


def fnv1a(data, h=1469598103934665603):
    for c in data:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def rewrite_payload(path, edit):
    """Rewrites a cache file's payload with edit(payload) and a valid checksum (a file a
    well-meaning tool made, not a corrupt one): magic | key length | key | payload length |
    checksum | payload (jit/kernel_cache.cpp)."""
    data = path.read_bytes()
    klen = struct.unpack_from("<Q", data, 8)[0]
    key = data[16:16 + klen]
    payload = edit(data[16 + klen + 16:])
    head = data[:16 + klen] + struct.pack("<QQ", len(payload), fnv1a(payload, fnv1a(key)))
    path.write_bytes(head + payload)


def test_second_process_replays_from_its_first_iteration(tmp_path, seed):
    cache = tmp_path / "cache"
    cold = run(tmp_path, cache, seed)
    assert cold["loaded"] == 0
    assert cold["recorded"][1] > 0 and cold["recorded"][-1] == 0  # records, then replays
    assert len(trace_files(cache)) >= 1
    warm = run(tmp_path, cache, seed)
    assert warm["loaded"] >= 1, warm
    assert warm["recorded"] == [0] * len(warm["recorded"]), warm  # replays from the first
    assert warm["refused"] == 0 and "warm start" not in warm["stderr"]


def test_warm_process_passes_verify(tmp_path, seed):
    cache = tmp_path / "cache"
    run(tmp_path, cache, seed)
    warm = run(tmp_path, cache, seed, extra_env={"KILN_VERIFY": "1"})
    assert warm["loaded"] >= 1 and warm["recorded"][0] == 0


@pytest.mark.parametrize("mode", ["tanh", "wide"])
def test_changed_program_at_the_same_sites_never_replays_a_stale_trace(tmp_path, seed, mode):
    # The same script and sites; the second run takes another op (tanh for relu) or
    # another shape (24 rows for 16): the stored trace is loaded under its anchor, but
    # the walk leaves it at the first op that differs and records, right values.
    cache = tmp_path / "cache"
    run(tmp_path, cache, seed, mode="relu")
    changed = run(tmp_path, cache, seed, mode=mode)
    assert changed["loaded"] >= 1
    assert changed["recorded"][0] > 0  # the stored relu trace did not replay
    assert changed["recorded"][-1] == 0  # its own trace compiled and replays
    again = run(tmp_path, cache, seed, mode=mode)  # both variants are stored now
    assert again["recorded"] == [0] * len(again["recorded"])


@pytest.mark.parametrize("damage", ["flip", "truncate", "group_writable", "foreign_build"])
def test_damaged_or_foreign_file_is_refused_and_the_run_stays_right(tmp_path, seed, damage):
    cache = tmp_path / "cache"
    run(tmp_path, cache, seed)
    files = trace_files(cache)
    assert files
    for f in files:
        if damage == "flip":
            data = bytearray(f.read_bytes())
            data[-5] ^= 0x40
            f.write_bytes(bytes(data))
        elif damage == "truncate":
            f.write_bytes(f.read_bytes()[:-7])
        elif damage == "group_writable":
            os.chmod(f, 0o660)
        else:
            # The build id is the payload's second field (tracer/persist.cpp): a string
            # after the format version. Same length, another build.
            def other_build(p):
                n = struct.unpack_from("<q", p, 4)[0]
                build = bytes(p[12:12 + n])
                return p[:12] + build.replace(b"format", b"FORMAT", 1) + p[12 + n:]
            rewrite_payload(f, other_build)
    warm = run(tmp_path, cache, seed)
    assert warm["loaded"] == 0
    assert warm["recorded"][0] > 0 and warm["recorded"][-1] == 0  # recorded and compiled
    expected = {"flip": "checksum mismatch", "truncate": "truncated",
                "group_writable": "not trusted", "foreign_build": "another build of kiln"}
    assert "[kiln] warm start: refused" in warm["stderr"], warm["stderr"]
    assert expected[damage] in warm["stderr"], warm["stderr"]
    if damage == "foreign_build":
        assert warm["refused"] == len(files)
    if damage != "group_writable":  # the recompile overwrote the files: the next run is warm
        healed = run(tmp_path, cache, seed)
        assert healed["loaded"] >= 1 and healed["recorded"][0] == 0


def test_two_processes_write_the_cache_at_once(tmp_path, seed):
    cache = tmp_path / "cache"
    procs = [run(tmp_path, cache, seed, iters=8, wait=False) for _ in range(3)]
    for p in procs:
        finish(p)
    assert not [p for p in (cache / "traces").iterdir() if p.name.endswith(".tmp")]
    warm = run(tmp_path, cache, seed)
    assert warm["loaded"] >= 1 and warm["refused"] == 0, warm
    assert warm["recorded"] == [0] * len(warm["recorded"])
    assert "refused" not in warm["stderr"]


def test_warm_start_off(tmp_path, seed):
    cache = tmp_path / "cache"
    run(tmp_path, cache, seed)
    off = run(tmp_path, cache, seed, extra_env={"KILN_WARM_START": "0"})
    assert off["loaded"] == 0 and off["recorded"][0] > 0
