#!/usr/bin/env bash
# Installs the CPU peers that bench/cpu_workloads.py compares kiln with: PyTorch 2.x
# (eager and torch.compile/inductor), JAX (jax.jit on CPU) and numpy, into ONE venv
# built from Debian's /usr/bin/python3 (3.11), the interpreter kiln's module is built
# for. The venv does not see Debian's site-packages (that would mix in torch 1.13).
# Not part of CI. Safe to run again: it installs nothing when everything imports.
#
#   bash bench/setup_cpu_peers.sh                 venv in ~/.cache/kiln-bench-venv
#   KILN_BENCH_VENV=/path bash bench/setup_cpu_peers.sh
#
# Only PyPI is reachable here, so torch is PyPI's default wheel: it pulls the CUDA
# libraries (about 4 GB on disk); they are never loaded on a machine without a GPU.
set -euo pipefail

VENV="${KILN_BENCH_VENV:-$HOME/.cache/kiln-bench-venv}"
PEERS=(${KILN_BENCH_PEERS:-"torch>=2.4" "jax>=0.4.30" "numpy"})
log() { printf '[peers] %s\n' "$*" >&2; }

# torch.compile's inductor compiles generated C++ with g++ and needs Python.h.
need=()
command -v g++ >/dev/null || need+=(g++)
[[ -f /usr/include/python3.11/Python.h ]] || need+=(python3-dev)
if ((${#need[@]})); then
  SUDO=(); [[ "$(id -u)" -eq 0 ]] || SUDO=(sudo)
  log "apt: ${need[*]}"
  "${SUDO[@]}" apt-get update -q
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV from /usr/bin/python3"
  /usr/bin/python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"

check='import torch, jax, numpy; assert int(torch.__version__.split(".")[0]) >= 2; torch.compile'
if "$PY" -c "$check" 2>/dev/null; then
  log "peers already installed in $VENV"
else
  log "installing ${PEERS[*]} into $VENV (large download)"
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q "${PEERS[@]}"
fi
"$PY" -c 'import torch, jax, numpy, sys; print("[peers] python", sys.version.split()[0], "torch", torch.__version__, "jax", jax.__version__, "numpy", numpy.__version__, file=sys.stderr)'
log "run: PYTHONPATH=<build>/python $PY bench/cpu_workloads.py"
