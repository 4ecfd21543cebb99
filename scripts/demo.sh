#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and runs the demos:
# the Python demo (examples/demo.py: an MLP and a transformer block as plain eager code,
# faster after warmup; prints the speedup and the explain() report, writes the warmup
# plot and a Chrome trace to ./demo-out), then the C++ demo (the same in C++, plus a
# CPU-vs-GPU check). Arguments go to the Python demo (e.g. --quick, --device cpu).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
BUILD="${KILN_BUILD_DIR:-build}"
PYTHONPATH="$BUILD/python" /usr/bin/python3 examples/demo.py "$@"
echo
exec "$BUILD/kiln_demo"
