#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and runs the demo
# (eager ops on the CPU, and on the GPU when there is one). Arguments go to the demo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
exec "${KILN_BUILD_DIR:-build}/kiln_demo" "$@"
