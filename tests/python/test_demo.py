"""The demo (examples/demo.py, the README's first command) runs to completion on the CPU
with --quick and prints the speedup, the explain() table with its graph break and the
plot it wrote."""

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import kiln

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_demo_quick_on_cpu(tmp_path):
    env = dict(os.environ, KILN_PLOT_BACKEND="svg",
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__))))
    env.pop("KILN_TRACE", None)  # the demo shows the tracer (also in the KILN_TRACE=0 run)
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "demo.py"), "--quick", "--device",
         "cpu", "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert re.search(r"^speedup after warmup: \d+\.\d+x$", text, re.M), text
    assert re.search(r"per-iteration time before warmup .* median \d+\.\d+ ms", text), text
    assert "kiln explain:" in text and "Graph breaks (most costly first" in text, text
    assert re.search(r"demo\.py:\d+ \(\w+\)\s+item\(\) reads a value on the host", text), text
    assert "compiled trace(s)" in text
    root = ET.parse(tmp_path / "warmup.svg").getroot()
    assert root.tag.endswith("svg")
    assert len(root.findall(".//{http://www.w3.org/2000/svg}circle")) == 60
    assert "profiler failed" not in out.stderr, out.stderr
    assert ("chrome trace of" in text) == (tmp_path / "trace.json").exists()
