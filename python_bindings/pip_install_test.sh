#!/usr/bin/env bash
# ctest python_pip_install: `pip install .` of this source tree into a fresh virtual
# environment of Debian's python3 (--system-site-packages: numpy from Debian), then,
# from outside the tree and with no PYTHONPATH, `import kiln` and an op checked against
# numpy; the module must load the libkiln.so installed beside it, not the build's.
#
#   pip_install_test.sh SRC BUILD [PYTHON] [full]
#
# By default the install packages BUILD's module (KILN_PIP_PREBUILT: seconds); with
# `full` it runs the whole CMake build as a user's `pip install .` does (a second build
# of kiln: many minutes on 2 cores, so not in CI's ctest). pip fetches
# scikit-build-core from PyPI for its isolated build environment.
set -euo pipefail
SRC=$1
BUILD=$2
PY=${3:-/usr/bin/python3}
MODE=${4:-prebuilt}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PY" -m venv --system-site-packages "$work/venv"
args=(--config-settings="build-dir=$work/build")
[[ "$MODE" == full ]] || args+=(--config-settings="cmake.define.KILN_PIP_PREBUILT=$BUILD")
start=$(date +%s)
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check "${args[@]}" "$SRC"
echo "pip install ($MODE): $(($(date +%s) - start)) s"

cd "$work"
env -u PYTHONPATH "$work/venv/bin/python" - "$work/venv" <<'PYEOF'
import os, sys
import numpy as np
import kiln

venv = os.path.realpath(sys.argv[1])
where = os.path.realpath(kiln.__file__)
assert where.startswith(venv), f"kiln imported from {where}, not from the venv {venv}"
libs = {os.path.realpath(line.split()[-1]) for line in open("/proc/self/maps")
        if "libkiln.so" in line}
assert libs and all(p.startswith(venv) for p in libs), f"libkiln loaded from {libs}"
a = np.random.default_rng().standard_normal((3, 4)).astype(np.float32)
y = kiln.softmax(kiln.tensor(a) @ kiln.tensor(a.T), -1).numpy()
e = np.exp(a @ a.T - (a @ a.T).max(-1, keepdims=True))
np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
print("import kiln from", os.path.dirname(where), "ok")
PYEOF
