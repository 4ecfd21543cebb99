"""The main process's side of bench/gpu_workloads.py: each worker (this directory's
gpu_workloads.py with --worker) runs in its own process group under the run's time
budget, and a system's worker is restarted after the workload it died in."""

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time

# The script the workers run (its --worker modes).
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_workloads.py")

LIVE = set()  # worker processes running now (each in its own process group)


def stop_workers(signum, frame):
    """SIGTERM / SIGINT (gpu_run.sh's step limit): stop the running worker, whose own
    process group the signal does not reach, then exit."""
    for proc in list(LIVE):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sys.exit(128 + signum)


def run_process(cmd, env, timeout):
    """Runs cmd in its own process group, passing its stderr through; returns (exit
    status or 'timeout', last stderr line that is not a progress line, stdout)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)
    LIVE.add(proc)
    tail = collections.deque(maxlen=30)

    def pump():
        for line in proc.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            if line.strip() and not line.startswith("  ["):
                tail.append(line.strip())

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    stdout = []
    out_reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
    out_reader.start()
    try:
        rc = proc.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and what it started (compilers)
        except ProcessLookupError:
            pass
        proc.wait()
        rc = "timeout"
    LIVE.discard(proc)
    reader.join(5)
    out_reader.join(5)
    last = next((t for t in reversed(tail) if not t.startswith(("warnings.warn", "W0", "I0"))), "")
    return rc, last[:200], "".join(stdout)


class Runner:
    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        self.start = time.perf_counter()
        self.deadline = self.start + args.budget

    def left(self):
        return self.deadline - time.perf_counter()

    def interpreter(self, name):
        return self.args.kiln_python if name.startswith("kiln") else self.args.torch_python

    def passthrough(self):
        a = self.args
        out = [f"--repeats={a.repeats}", f"--target-ms={a.target_ms}", f"--warmup={a.warmup}",
               f"--tol={a.tol}", f"--device={a.device}", f"--data={os.path.join(self.tmp, 'data')}"]
        return out + (["--quick"] if a.quick else [])

    def env(self, name):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        tmp = self.tmp
        # kiln traced cold: a fresh, empty cache; kiln_warm: a new process, that cache filled
        shared = name in ("kiln_traced", "kiln_warm")
        env["KILN_CACHE_DIR"] = os.path.join(tmp, "kiln-cache" if shared else f"kiln-cache-{name}")
        if name.startswith("torch"):
            env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tmp, f"inductor-{name}"))
            env.setdefault("TRITON_CACHE_DIR", os.path.join(tmp, f"triton-{name}"))
        return env

    def probe(self, which):
        interp = self.args.kiln_python if which == "probe_kiln" else self.args.torch_python
        try:
            rc, last, out = run_process(interp + [SCRIPT, "--worker", which],
                                        dict(os.environ), min(120, max(5, self.left())))
        except OSError as e:
            return dict(error=f"cannot start {' '.join(interp)}: {e}")
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return dict(error=f"probe exited with status {rc}: {last}")

    def prepare(self, interps, indices):
        """Writes the inputs and the reference: under the first interpreter that can."""
        data = os.path.join(self.tmp, "data")
        os.makedirs(data, exist_ok=True)
        why = ""
        for interp in interps:
            rc, last, _ = run_process(interp + [SCRIPT, "--worker", "prepare",
                                                "--rows", ",".join(map(str, indices))]
                                      + self.passthrough(), dict(os.environ),
                                      min(300, max(5, self.left())))
            try:
                with open(os.path.join(data, "manifest.json")) as f:
                    return json.load(f)
            except (OSError, ValueError):
                why = f"status {rc}: {last}"
        sys.exit(f"could not prepare the inputs ({why})")

    def run_system(self, name, indices, limit_s):
        """Runs the worker of one system over the rows `indices`; restarts it after the
        row it died in. Returns (meta, {index: result}) or (dict(skipped=...), {})."""
        meta, results, pending, attempts = {}, {}, list(indices), 0
        end = min(self.deadline, time.perf_counter() + limit_s)
        while pending:
            left = end - time.perf_counter()
            if left < 5:
                for i in pending:
                    results[i] = dict(error="not run: out of time")
                break
            out = os.path.join(self.tmp, f"{name}-{attempts}.json")
            cmd = self.interpreter(name) + [
                SCRIPT, "--worker", name, "--worker-out", out,
                "--rows", ",".join(map(str, pending))] + self.passthrough()
            if attempts == 0:
                cmd.append("--limits")
            attempts += 1
            try:
                rc, last, _ = run_process(cmd, self.env(name), left)
            except OSError as e:
                return dict(skipped=f"cannot start {self.interpreter(name)[0]}: {e}"), {}
            try:
                with open(out) as f:
                    part = json.load(f)
            except (OSError, ValueError):
                part = {}
            if "skipped" in part:
                return dict(skipped=part["skipped"]), {}
            if not part and not meta:
                why = "timed out" if rc == "timeout" else f"exited with status {rc}"
                return dict(skipped=f"worker {why}: {last}"), {}
            for key in ("version", "device_name", "limits", "compiler_start_s",
                        "compiler_start_error"):
                if key in part:
                    meta.setdefault(key, part[key])
            for res in part.get("rows", []):
                results[res["index"]] = res
            pending = [i for i in pending if i not in results]
            if not pending:
                break
            current = part.get("current", pending[0])
            if current not in pending:
                current = pending[0]
            if rc == "timeout":
                results[current] = dict(error=f"timeout: stopped here at the time limit "
                                        f"({limit_s:.0f} s a system, --budget for the run)")
                for i in pending:
                    results.setdefault(i, dict(error="not run: out of time"))
                break
            why = f"worker died (status {rc})" + (f": {last}" if last else "")
            results[current] = dict(error=why)
            pending.remove(current)
            if attempts > 4:
                for i in pending:
                    results[i] = dict(error="not run: the worker kept dying")
                break
        return meta, results
