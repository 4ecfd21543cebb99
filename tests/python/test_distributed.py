"""kiln.distributed, DistributedDataParallel and DistributedSampler.

Multi-process tests start 2 ranks (one thread each: KILN_NUM_THREADS=1) with mpirun
(backend "mpi"; skipped without Open MPI) and with python -m kiln.distributed.run
(backend "gloo", kiln's tcp sockets); each rank checks its collectives against numpy
(tests/python/dist_worker.py). The GPT test trains bench/models' GPT with DDP on 2 ranks
(MPI, and tcp through the launcher) and compares the parameters with one process trained
on the combined batch."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.distributed as dist
from helpers import requires_torch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dist_worker.py")
MPIRUN = shutil.which("mpirun")
requires_mpi = pytest.mark.skipif(MPIRUN is None or not dist.is_mpi_available(),
                                  reason="Open MPI (mpirun, libmpi.so.40) is not installed")


def _env():
    env = dict(os.environ, KILN_NUM_THREADS="1", OMP_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(kiln.__file__)), HERE,
                                         env.get("PYTHONPATH", "")])
    return env


def _mpirun(*args, timeout=600):
    cmd = [MPIRUN, "-np", "2", "--bind-to", "none", sys.executable, WORKER, *args]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _launch(*args, timeout=600):
    cmd = [sys.executable, "-m", "kiln.distributed.run", "--standalone", "--nproc_per_node", "2",
           WORKER, *args]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


# ---- one process

def test_calls_before_init_raise_runtime_error():
    assert dist.is_available() and not dist.is_initialized()
    for call in (dist.get_rank, dist.get_world_size, dist.barrier,
                 lambda: dist.all_reduce(kiln.ones(2)), lambda: dist.broadcast(kiln.ones(2), 0)):
        with pytest.raises(RuntimeError, match="init_process_group"):
            call()
    with pytest.raises(RuntimeError, match="init_process_group"):
        kiln.nn.parallel.DistributedDataParallel(kiln.nn.Linear(2, 2))


def test_world_of_one(seed):
    rng = np.random.default_rng(seed)
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        assert dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1
        assert dist.get_backend() == "tcp"
        with pytest.raises(ValueError, match="already initialized"):
            dist.init_process_group("gloo", rank=0, world_size=1)
        x = rng.standard_normal((3, 4)).astype(np.float32)
        t = kiln.from_numpy(x.copy())
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        np.testing.assert_allclose(t.numpy(), x)
        with pytest.raises(TypeError, match="AVG"):
            dist.all_reduce(kiln.ones(3, dtype=kiln.int64), op=dist.ReduceOp.AVG)
        with pytest.raises(ValueError, match="src=1"):
            dist.broadcast(kiln.ones(2), src=1)
        with pytest.raises(ValueError, match="world_size"):
            dist.all_gather_into_tensor(kiln.zeros(5), kiln.ones(2))
        # DDP on one rank: gradients unchanged, buckets cover every parameter once
        lin = kiln.nn.Linear(4, 3)
        ddp = kiln.nn.parallel.DistributedDataParallel(lin, bucket_cap_mb=1e-5)
        assert ddp.module is lin and ddp.require_backward_grad_sync
        assert sorted(i for b in ddp._bucket_indices() for i in b) == [0, 1]
        ddp(kiln.from_numpy(x)).sum().backward()
        np.testing.assert_allclose(lin.weight.grad.numpy(), np.tile(x.sum(0), (3, 1)), rtol=1e-5)
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def test_bad_backend_is_named():
    with pytest.raises(ValueError, match="backend='bogus'"):
        dist.init_process_group("bogus", rank=0, world_size=1)
    assert not dist.is_initialized()


def test_nccl_without_gpu_is_a_clear_error():
    if kiln.cuda.is_available():
        pytest.skip("a GPU is present (bench/distributed_gpu.py covers NCCL there)")
    with pytest.raises(RuntimeError, match="nccl"):
        dist.init_process_group("nccl", rank=0, world_size=1)
    assert not dist.is_initialized() and not dist.is_nccl_available()


# ---- DistributedSampler against PyTorch's

@requires_torch
@pytest.mark.parametrize("n", [0, 1, 7, 10, 13])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sampler_matches_torch_in_order(n, replicas, drop_last):
    from torch.utils.data.distributed import DistributedSampler as Theirs

    from kiln.utils.data import DistributedSampler as Ours

    data = list(range(n))
    for rank in range(replicas):
        ours = Ours(data, num_replicas=replicas, rank=rank, shuffle=False, drop_last=drop_last)
        theirs = Theirs(data, num_replicas=replicas, rank=rank, shuffle=False,
                        drop_last=drop_last)
        assert len(ours) == len(theirs)
        assert list(ours) == list(theirs)


@pytest.mark.parametrize("drop_last", [False, True])
def test_sampler_shuffles_the_same_on_every_rank(drop_last):
    from kiln.utils.data import DistributedSampler

    n, replicas = 23, 4
    samplers = [DistributedSampler(range(n), replicas, r, seed=5, drop_last=drop_last)
                for r in range(replicas)]
    for epoch in (0, 1):
        for s in samplers:
            s.set_epoch(epoch)
        parts = [list(s) for s in samplers]
        assert len({len(p) for p in parts}) == 1 and len(parts[0]) == len(samplers[0])
        order = [parts[r][i] for i in range(len(parts[0])) for r in range(replicas)]
        if drop_last:
            assert len(order) == 20 and len(set(order)) == 20
        else:
            assert sorted(order[:n]) == list(range(n)) and order[n:] == order[:len(order) - n]
        assert order != list(range(len(order)))  # shuffled
        assert [list(s) for s in samplers] == parts  # deterministic per epoch
    with pytest.raises(ValueError, match="Invalid rank 4"):
        DistributedSampler(range(3), num_replicas=4, rank=4)


def test_sampler_needs_group_or_arguments():
    from kiln.utils.data import DistributedSampler

    with pytest.raises(RuntimeError, match="not initialized"):
        DistributedSampler(range(4))


# ---- two processes

@requires_mpi
def test_collectives_mpi(seed):
    out = _ok(_mpirun("collectives", "mpi", str(seed)))
    assert out.count("collective checks passed") == 2 and "(mpi)" in out


def test_collectives_tcp_through_launcher(seed):
    out = _ok(_launch("collectives", "gloo", str(seed)))
    assert out.count("collective checks passed") == 2 and "(tcp)" in out


@requires_mpi
def test_mismatched_shapes_raise_on_every_rank_mpi(seed):
    out = _ok(_mpirun("mismatch", "mpi", str(seed)))
    assert out.count("the group still works") == 2


def test_mismatched_shapes_raise_on_every_rank_tcp(seed):
    out = _ok(_launch("mismatch", "gloo", str(seed)))
    assert out.count("the group still works") == 2


def test_launcher_returns_a_failing_rank_status(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    proc = subprocess.run([sys.executable, "-m", "kiln.distributed.run", "--standalone",
                           "--nproc-per-node=2", str(script)], env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr


@pytest.mark.parametrize("launch", [pytest.param("mpirun", marks=requires_mpi), "launcher"])
def test_traced_all_reduce_replays_and_a_mismatch_raises(launch, seed):
    """Each rank: a traced loop with all_reduce replays and matches numpy; then a call
    with another shape on one rank raises the signature check's ValueError on both, and
    the group still works (dist_worker.py traced_mismatch)."""
    if launch == "mpirun":
        out = _ok(_mpirun("traced_mismatch", "mpi", str(seed)))
    else:
        out = _ok(_launch("traced_mismatch", "gloo", str(seed)))
    assert out.count("the group still works") == 2, out
    assert out.count("ranks disagree") == 2, out


@pytest.mark.parametrize("launch,steps", [pytest.param("mpirun", 3, marks=requires_mpi),
                                          ("launcher", 3),
                                          pytest.param("mpirun", 7, marks=requires_mpi),
                                          ("launcher", 7)])
def test_gpt_ddp_on_two_ranks_matches_one_process(launch, steps, seed, tmp_path):
    """mpirun: backend "mpi"; the launcher: backend "gloo" (kiln's tcp). With 7 steps each
    rank also checks explain() (dist_worker.py check_one_trace_per_step): after warmup
    the step (forward, backward, bucketed all_reduce, clip, AdamW) is one trace that
    replays every step, no all_reduce graph break, no recompiles."""
    import dist_gpt

    if launch == "mpirun":
        out = _ok(_mpirun("gpt", "mpi", str(seed), str(tmp_path), str(steps)))
    else:
        out = _ok(_launch("gpt", "gloo", str(seed), str(tmp_path), str(steps)))
    # The workers trace unless the environment they inherit says KILN_TRACE=0 (the
    # python_tests_eager run; this process's tracing may have been switched by a test).
    if steps > 3 and os.environ.get("KILN_TRACE", "1") != "0":
        assert out.count("one trace per step") == 2, out
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    reference, _ = dist_gpt.train(kiln, seed, world_size=1, rank=0, ddp=False, steps=steps)
    for name, expected in reference.items():
        np.testing.assert_array_equal(ranks[0][name], ranks[1][name], err_msg=name)
        # Two half-batch gradients summed differ from one whole-batch gradient in the last
        # bits, and AdamW amplifies that where a gradient is near zero (its update is
        # m / sqrt(v), of size lr whatever the gradient's). 3e-5 is 1% of the most STEPS
        # AdamW steps can move a weight (STEPS * lr = 3e-3); a rank whose gradient is
        # missing or wrongly averaged moves weights by ~lr per step and fails. A near-zero
        # gradient's sign can flip between the two summations, so a few elements in a
        # tensor (seen: 1 of 4096, 4.7e-5 after 7 steps) may exceed 3e-5, by at most 5x.
        got = ranks[0][name]
        off = np.abs(got - expected) > 3e-5 + 1e-4 * np.abs(expected)
        assert off.sum() <= max(2, expected.size // 1000), f"{name}: {off.sum()} elements off"
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1.5e-4, err_msg=name)
    # the steps really moved the weights (the comparison is not of untouched values)
    start, _ = dist_gpt.train(kiln, seed, steps=0)
    assert max(np.abs(reference[n] - start[n]).max() for n in start) > 1e-4


# ---- NCCL (GPU machine only)

requires_cuda = pytest.mark.skipif(not kiln.cuda.is_available(), reason="no CUDA device")


@requires_cuda
def test_nccl_world_of_one(seed):
    rng = np.random.default_rng(seed)
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        assert dist.get_backend() == "nccl"
        x = rng.standard_normal((5, 3)).astype(np.float32)
        t = kiln.from_numpy(x.copy()).cuda()
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        np.testing.assert_allclose(t.cpu().numpy(), x)
        with pytest.raises(RuntimeError, match="does not serve cpu"):
            dist.all_reduce(kiln.ones(2))
        lin = kiln.nn.Linear(3, 2).cuda()
        ddp = kiln.nn.parallel.DistributedDataParallel(lin, device_ids=[0])
        ddp(kiln.from_numpy(x).cuda()).sum().backward()
        np.testing.assert_allclose(lin.weight.grad.cpu().numpy(), np.tile(x.sum(0), (2, 1)),
                                   rtol=1e-5)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@requires_cuda
def test_nccl_traced_step_is_captured_in_a_cuda_graph(seed):
    """World size 1 through NCCL: a step with an all_reduce (a manual SGD step, then a
    DDP Linear step) replays as one trace with the ncclAllReduce inside its CUDA graph
    (no 'cuda graph off' note) and matches eager (tracing off) and numpy."""
    if not dist.is_nccl_available():
        pytest.skip("libnccl.so.2 not found")
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal((64, 32)).astype(np.float32)
    xs = [rng.standard_normal((64, 32)).astype(np.float32) for _ in range(8)]

    def run(traced):
        kiln.reset()
        previous = kiln.set_config(warmup=2, background_compile=False)
        was = kiln.is_tracing()
        kiln.set_tracing(traced)
        try:
            w = kiln.from_numpy(w0.copy()).cuda()
            lin = kiln.nn.Linear(32, 4).cuda()
            with kiln.no_grad():
                lin.weight.copy_(kiln.from_numpy(w0[:4].copy()).cuda())
                lin.bias.zero_()
            ddp = kiln.nn.parallel.DistributedDataParallel(lin, device_ids=[0])
            opt = kiln.optim.SGD(lin.parameters(), lr=0.1)
            losses = []
            for x in xs:
                g = kiln.from_numpy(x).cuda() * w
                dist.all_reduce(g, op=dist.ReduceOp.SUM)
                w.copy_(w - g * 0.01)
                y = ddp(kiln.from_numpy(x).cuda())
                loss = (y * y).mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                losses.append((loss + w.sum()).item())  # the step's one host read
            return (w.cpu().numpy(), lin.weight.detach().cpu().numpy(), losses,
                    kiln.explain())
        finally:
            kiln.set_tracing(was)
            kiln.set_config(**previous)

    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        w_eager, lin_eager, losses_eager, _ = run(False)
        w_traced, lin_traced, losses_traced, e = run(True)
    finally:
        dist.destroy_process_group()
        kiln.reset()
    ref = w0.astype(np.float64)
    for x in xs:
        ref = ref - 0.01 * x * ref  # the world of one's SUM is the tensor itself
    np.testing.assert_allclose(w_eager, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w_traced, w_eager, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lin_traced, lin_eager, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses_traced, losses_eager, rtol=1e-5, atol=1e-5)
    step = [t for t in e.traces if any(op.startswith("all_reduce") for op in t["ops"])]
    assert step and sum(t["replays"] for t in step) > 0, str(e)
    assert all(t["backend"] == "nvrtc" for t in step), str(e)
    notes = [n for t in step for n in t["notes"]]
    assert not [n for n in notes if "cuda graph off" in n], notes
    captures = [int(n.split()[2]) for n in notes if n.startswith("cuda graph: ") and
                "capture(s)" in n]
    assert captures and min(captures) >= 1, notes
    assert not [b for b in e.graph_breaks if "all_reduce" in b["reason"]], str(e)


@pytest.mark.skipif(kiln.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_collectives_nccl_two_gpus(seed):
    out = _ok(_launch("collectives", "nccl", str(seed)))
    assert out.count("collective checks passed") == 2 and "(nccl)" in out
