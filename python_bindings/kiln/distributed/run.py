"""python -m kiln.distributed.run: torchrun's launcher for one node.

    python -m kiln.distributed.run --standalone --nproc_per_node 2 train.py --lr 3e-4

Starts nproc_per_node copies of the script (or -m module) with torchrun's environment:
RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, MASTER_ADDR,
MASTER_PORT, TORCHELASTIC_RUN_ID. --standalone picks a free port on 127.0.0.1. Several
nodes: run it on each with --nnodes, --node_rank, --master_addr and --master_port.
When one process fails the others are stopped, and the launcher exits with its status.
Elastic flags (--rdzv_*, --max_restarts, --monitor_interval) are accepted; restarts are
not made. For the mpi backend, mpirun works as well (kiln reads OMPI_COMM_WORLD_RANK/SIZE).
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import uuid


def _parser():
    p = argparse.ArgumentParser(prog="python -m kiln.distributed.run",
                                description="torchrun's launcher for kiln (one node's processes)")
    add = p.add_argument
    add("--nnodes", default="1")
    add("--nproc_per_node", "--nproc-per-node", default="1")
    add("--node_rank", "--node-rank", type=int, default=0)
    add("--master_addr", "--master-addr", default="127.0.0.1")
    add("--master_port", "--master-port", type=int, default=29500)
    add("--standalone", action="store_true")
    for name in ("--rdzv_backend", "--rdzv-backend", "--rdzv_endpoint", "--rdzv-endpoint",
                 "--rdzv_id", "--rdzv-id", "--rdzv_conf", "--rdzv-conf", "--max_restarts",
                 "--max-restarts", "--monitor_interval", "--monitor-interval", "--start_method",
                 "--start-method", "--role", "--log_dir", "--log-dir", "--redirects", "--tee",
                 "--local_addr", "--local-addr"):
        add(name, default=None, help=argparse.SUPPRESS)
    add("-m", "--module", action="store_true", help="run the target as a module (python -m)")
    add("--no_python", "--no-python", action="store_true", help="run the target as a program")
    add("training_script")
    add("training_script_args", nargs=argparse.REMAINDER)
    return p


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nproc(value):
    if value in ("cpu", "auto"):
        return os.cpu_count() or 1
    if value == "gpu":
        from .. import cuda

        return max(cuda.device_count(), 1)
    return int(value)


def _command(args):
    if args.no_python:
        return [args.training_script] + args.training_script_args
    if args.module:
        return [sys.executable, "-u", "-m", args.training_script] + args.training_script_args
    return [sys.executable, "-u", args.training_script] + args.training_script_args


def main(argv=None):
    args = _parser().parse_args(argv)
    nproc, nnodes = _nproc(args.nproc_per_node), int(str(args.nnodes).split(":")[-1])
    addr, port = args.master_addr, args.master_port
    if args.rdzv_endpoint and not args.standalone:
        host, _, p = args.rdzv_endpoint.partition(":")
        addr, port = host or addr, int(p) if p else port
    if args.standalone:
        nnodes, addr, port = 1, "127.0.0.1", _free_port()
    world = nproc * nnodes
    run_id = args.rdzv_id or uuid.uuid4().hex[:8]
    procs = []
    for local in range(nproc):
        env = dict(os.environ)
        env.update(RANK=str(args.node_rank * nproc + local), LOCAL_RANK=str(local),
                   WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(nproc),
                   GROUP_RANK=str(args.node_rank), ROLE_RANK=str(args.node_rank * nproc + local),
                   ROLE_WORLD_SIZE=str(world), MASTER_ADDR=addr, MASTER_PORT=str(port),
                   TORCHELASTIC_RUN_ID=run_id)
        procs.append(subprocess.Popen(_command(args), env=env))
    status = 0
    try:
        while procs:
            for p in list(procs):
                rc = p.poll()
                if rc is None:
                    continue
                procs.remove(p)
                if rc != 0 and status == 0:
                    status = rc
                    print(f"[kiln.distributed.run] a process (pid {p.pid}) exited with status "
                          f"{rc}; stopping the others", file=sys.stderr)
                    for q in procs:
                        q.send_signal(signal.SIGTERM)
            time.sleep(0.05)
    except KeyboardInterrupt:
        for q in procs:
            q.send_signal(signal.SIGINT)
        for q in procs:
            q.wait()
        status = 130
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main())
