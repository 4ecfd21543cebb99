"""One rank of the multi-process tests of test_distributed.py, started by mpirun or by
python -m kiln.distributed.run. Checks against numpy (float64) in the worker itself and
exits non-zero on any failure.

    dist_worker.py collectives BACKEND SEED
    dist_worker.py mismatch BACKEND SEED
    dist_worker.py gpt BACKEND SEED OUT_DIR [STEPS]  (writes OUT_DIR/rank<r>.npz; with
        more than WARM_STEPS steps also checks explain(): one trace per step after warmup)
    dist_worker.py traced_mismatch BACKEND SEED
"""

import os
import sys

import numpy as np

import kiln
import kiln.distributed as dist

DTYPES = {"float32": (kiln.float32, np.float32), "float64": (kiln.float64, np.float64),
          "int64": (kiln.int64, np.int64), "int32": (kiln.int32, np.int32)}


DEV = "cpu"  # "cuda:<LOCAL_RANK>" for the nccl backend


def K(array):
    return kiln.from_numpy(array).to(DEV)


def data(seed, rank, shape, np_dtype):
    rng = np.random.default_rng([seed, rank])
    if np.issubdtype(np_dtype, np.integer):
        return rng.integers(-5, 6, shape).astype(np_dtype)
    return rng.standard_normal(shape).astype(np_dtype)


def reference(op, arrays):
    a = np.stack([x.astype(np.float64) for x in arrays])
    return {dist.ReduceOp.SUM: a.sum(0), dist.ReduceOp.AVG: a.mean(0),
            dist.ReduceOp.PRODUCT: a.prod(0), dist.ReduceOp.MIN: a.min(0),
            dist.ReduceOp.MAX: a.max(0)}[op]


def check(actual, expected, what, tol=1e-5):
    a = actual.cpu().numpy().astype(np.float64)
    if not np.allclose(a, expected, rtol=tol, atol=tol):
        raise AssertionError(f"rank {dist.get_rank()}: {what}: {a} != {expected}")


def collectives(seed):
    r, n = dist.get_rank(), dist.get_world_size()
    checks = 0
    for name, (kd, nd) in DTYPES.items():
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT,
                   dist.ReduceOp.MIN, dist.ReduceOp.MAX):
            if op == dist.ReduceOp.AVG and name.startswith("int"):
                continue
            mine = [data(seed + op, q, (3, 5), nd) for q in range(n)]
            t = K(mine[r].copy())
            work = dist.all_reduce(t, op=op, async_op=(op == dist.ReduceOp.MAX))
            if work is not None:
                assert work.wait() and work.is_completed()
            check(t, reference(op, mine), f"all_reduce {name} op {op}")
            checks += 1
        # broadcast from the last rank
        src = n - 1
        t = K(data(seed, r, (7,), nd))
        dist.broadcast(t, src=src)
        check(t, data(seed, src, (7,), nd).astype(np.float64), f"broadcast {name}")
        # all_gather / all_gather_into_tensor
        x = data(seed + 10, r, (2, 3), nd)
        outs = [kiln.zeros(2, 3, dtype=kd, device=DEV) for _ in range(n)]
        dist.all_gather(outs, K(x.copy()))
        for q in range(n):
            check(outs[q], data(seed + 10, q, (2, 3), nd).astype(np.float64), f"all_gather {name}")
        big = kiln.zeros(2 * n, 3, dtype=kd, device=DEV)
        dist.all_gather_into_tensor(big, K(x.copy()))
        check(big, np.concatenate([data(seed + 10, q, (2, 3), nd) for q in range(n)]),
              f"all_gather_into_tensor {name}")
        # reduce_scatter / reduce_scatter_tensor
        full = [data(seed + 20, q, (n * 4,), nd) for q in range(n)]
        out = kiln.zeros(4, dtype=kd, device=DEV)
        dist.reduce_scatter_tensor(out, K(full[r].copy()), op=dist.ReduceOp.SUM)
        check(out, reference(dist.ReduceOp.SUM, full)[4 * r:4 * r + 4],
              f"reduce_scatter_tensor {name}")
        out = kiln.zeros(4, dtype=kd, device=DEV)
        dist.reduce_scatter(out, [K(full[r][4 * q:4 * q + 4].copy())
                                  for q in range(n)], op=dist.ReduceOp.MAX)
        check(out, reference(dist.ReduceOp.MAX, full)[4 * r:4 * r + 4], f"reduce_scatter {name}")
        checks += 5
    # float16 / bfloat16 sums (MPI has no 16-bit floats: kiln widens)
    for kd in (kiln.float16, kiln.bfloat16):
        mine = [data(seed + 30, q, (9,), np.float32) for q in range(n)]
        t = K(mine[r].copy()).to(kd)
        dist.all_reduce(t)
        expected = sum(kiln.from_numpy(m).to(kd).float().numpy().astype(np.float64) for m in mine)
        check(t.float(), expected, f"all_reduce {kd}", tol=2e-2)
        checks += 1
    # bool: SUM/MAX are "or", MIN "and"
    flags = [np.array([q == 0, True, False]) for q in range(n)]
    t = K(flags[r].copy())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert t.cpu().numpy().tolist() == [True, True, False], t.cpu().numpy()
    # a non-contiguous tensor is refused, naming the op
    try:
        dist.all_reduce(kiln.zeros(4, 4, device=DEV).t())
        raise AssertionError("non-contiguous all_reduce was accepted")
    except ValueError as e:
        assert "all_reduce" in str(e) and "contiguous" in str(e), e
    dist.barrier()
    print(f"rank {r}/{n} ({dist.get_backend()}): {checks + 1} collective checks passed")


def mismatch(seed):
    r = dist.get_rank()
    try:
        dist.all_reduce(kiln.ones(4 + 2 * r))
        raise AssertionError("all_reduce with different shapes across ranks was accepted")
    except ValueError as e:
        assert "ranks disagree" in str(e) and "all_reduce" in str(e), e
        print(f"rank {r}: {e}")
    try:
        dist.broadcast(kiln.ones(3, dtype=kiln.float32 if r == 0 else kiln.float64), src=0)
        raise AssertionError("broadcast with different dtypes across ranks was accepted")
    except ValueError as e:
        assert "float64" in str(e) and "float32" in str(e), e
    t = kiln.ones(5, device=DEV)  # the group still works
    dist.all_reduce(t)
    assert t.cpu().numpy().tolist() == [dist.get_world_size()] * 5
    print(f"rank {r}: mismatches raised on every rank; the group still works")


WARM_STEPS = 3  # steps after which the training step replays (warmup 2, compiled on the spot)


def check_one_trace_per_step(warm, end, steps):
    """explain() after WARM_STEPS steps (warm) and after the last (end): the all_reduce is
    never a graph break, nothing recompiles after warmup, each later step's only boundary
    is its loss.item(), and one trace holding the all_reduce replays once per step."""
    r = dist.get_rank()
    ar = [b for b in end.graph_breaks if "all_reduce" in b["reason"]]
    assert not ar, f"rank {r}: all_reduce is a graph break: {ar}\n{end}"
    assert len(end.recompiles) == len(warm.recompiles), f"rank {r}: recompiles\n{end}"

    def counts(e):
        return {(b["reason"], b["file"], b["line"]): b["count"] for b in e.graph_breaks}

    before = counts(warm)
    new = {k: v - before.get(k, 0) for k, v in counts(end).items() if v != before.get(k, 0)}
    assert new and all(k[0].startswith("item()") for k in new) and sum(new.values()) == steps, \
        f"rank {r}: boundaries after warmup {new}, expected {steps} item() reads\n{end}"
    replays = {t["id"]: t["replays"] for t in warm.traces}
    step = [t for t in end.traces if any(op.startswith("all_reduce") for op in t["ops"])]
    grown = {t["id"]: t["replays"] - replays.get(t["id"], 0) for t in step}
    assert sum(grown.values()) == steps, \
        f"rank {r}: all_reduce traces replayed {grown} times in {steps} steps\n{end}"
    print(f"rank {r}: one trace per step ({len(step[0]['ops'])} ops, all_reduce inside), "
          f"{steps} replays after warmup, no recompiles")


def gpt_ddp(seed, out_dir, steps):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import dist_gpt

    kiln.set_config(background_compile=False)  # compiles at warmup: exact replay counts
    seen = {}

    def on_step(s):
        if s == WARM_STEPS - 1:
            seen["warm"] = kiln.explain()
        if s == steps - 1:
            seen["end"] = kiln.explain()

    params, losses = dist_gpt.train(kiln, seed, dist.get_world_size(), dist.get_rank(), ddp=True,
                                    steps=steps, on_step=on_step)
    if steps > WARM_STEPS and kiln.is_tracing():  # not under KILN_TRACE=0
        check_one_trace_per_step(seen["warm"], seen["end"], steps - WARM_STEPS)
    np.savez(os.path.join(out_dir, f"rank{dist.get_rank()}.npz"), **params)
    print(f"rank {dist.get_rank()}: losses {losses}")


def traced_mismatch(seed):
    """A traced loop with an all_reduce replays and matches eager on each rank; then the
    ranks call it with different shapes: the ValueError of the signature check on every
    rank, and the group and the tracer still work."""
    r, n = dist.get_rank(), dist.get_world_size()
    kiln.set_config(background_compile=False)
    w0 = np.random.default_rng(seed).standard_normal(6).astype(np.float32)
    w, ref = K(w0.copy()), w0.astype(np.float64)
    for step in range(8):
        xs = [np.random.default_rng([seed, q, step]).standard_normal(6).astype(np.float32)
              for q in range(n)]
        g = K(xs[r]) * w
        dist.all_reduce(g, op=dist.ReduceOp.AVG)
        w.copy_(w - g * 0.5)
        loss = w.sum().item()
        ref = ref - 0.5 * np.mean([x.astype(np.float64) * ref for x in xs], axis=0)
        check(w, ref, f"traced step {step}")
        assert abs(loss - ref.sum()) < 1e-4 * (1 + abs(ref.sum())), (loss, ref.sum())
    e = kiln.explain()
    replays = sum(t["replays"] for t in e.traces
                  if any(o.startswith("all_reduce") for o in t["ops"]))
    assert replays > 0 or not kiln.is_tracing(), f"rank {r}: the trace never replayed\n{e}"
    assert not [b for b in e.graph_breaks if "all_reduce" in b["reason"]], str(e)
    for step in range(4):  # a loop whose last step has one rank's tensor longer
        # A rank replaying the loop's trace runs the all_reduce lazily, at the item() that
        # ends it; a rank recording runs it at the call: the error comes from either.
        try:
            g = K(np.ones(6 + 2 * r * (step == 3), np.float32)) * 2.0
            dist.all_reduce(g)
            g.sum().item()
            assert step < 3, "all_reduce with different shapes across ranks was accepted"
        except ValueError as err:
            assert step == 3 and "ranks disagree" in str(err) and "all_reduce" in str(err), err
            print(f"rank {r}: {err}")
    t = kiln.ones(5, device=DEV)  # the group still works, traced or not
    dist.all_reduce(t)
    assert t.cpu().numpy().tolist() == [n] * 5
    print(f"rank {r}: traced all_reduce replayed {replays} times and matched; the mismatch "
          f"raised; the group still works")


def main():
    global DEV
    mode, backend, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if backend == "nccl":
        DEV = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    dist.init_process_group(backend=backend)
    try:
        if mode == "collectives":
            collectives(seed)
        elif mode == "mismatch":
            mismatch(seed)
        elif mode == "gpt":
            import dist_gpt

            gpt_ddp(seed, sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else dist_gpt.STEPS)
        elif mode == "traced_mismatch":
            traced_mismatch(seed)
        else:
            raise SystemExit(f"unknown mode {mode}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
