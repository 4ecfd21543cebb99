"""tracer/break_reasons.def is the only source of reasons. From the sources: every row is
raised somewhere outside the tests (as BreakReason::<Id>), every reason is raised through
a row (no string literal handed to a function that ends or leaves a trace; the runtime's
lazy::sync only names what reads, the detail of HostRead). From Python: the
bindings' host reads and memory exports show up in explain() with their row and phase.
tests/cpp/test_break_reasons.cpp raises every row from a real program."""

import os
import re

import numpy as np
import pytest

import kiln

pytestmark = pytest.mark.usefixtures("fresh_tracer")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE_DIRS = ("runtime", "ops", "tracer", "jit", "python_bindings/src")
DEF = os.path.join(ROOT, "tracer", "break_reasons.def")
ROW = re.compile(r'^KILN_BREAK\((\w+),\s*(\w+),\s*"((?:[^"\\]|\\.)*)"\)\s*$')


def rows():
    out = []
    with open(DEF) as f:
        for line in f:
            m = ROW.match(line.strip())
            if m:
                out.append(m.groups())
            else:
                assert line.startswith("//") or not line.strip(), "malformed row: " + line
    return out


def sources():
    for d in SOURCE_DIRS:
        for base, _, files in os.walk(os.path.join(ROOT, d)):
            for name in files:
                if name.endswith((".h", ".cpp", ".cu", ".cuh")):
                    path = os.path.join(base, name)
                    with open(path, encoding="utf-8") as f:
                        yield os.path.relpath(path, ROOT), f.read()


def test_rows_are_well_formed():
    table = rows()
    assert table, "no rows in " + DEF
    names = [r[0] for r in table]
    assert len(set(names)) == len(names), names
    for name, phase, text in table:
        assert phase in ("Sync", "Record", "Replay", "Lifecycle"), (name, phase)
        assert text.count("{}") <= 1, (name, text)


def test_every_row_is_raised_outside_the_tests():
    code = {path: text for path, text in sources()
            if not path.startswith("tracer/break_reason.")}
    for name, _, _ in rows():
        users = [p for p, text in code.items() if "BreakReason::" + name in text]
        assert users, f"break reason {name} is never raised (no BreakReason::{name} in {SOURCE_DIRS})"


# Functions that end a trace or leave its compiled path: they take a BreakCause, never text.
RAISERS = re.compile(r'\b(on_sync|end_walk|note_break|side_exit|tracer::sync|check_break_cause)'
                     r'\(\s*"')
LAZY_SYNC = re.compile(r'\blazy::sync\(\s*"([^"]*)"')


def test_no_reason_is_raised_as_free_text():
    found_sync = 0
    for path, text in sources():
        assert not RAISERS.search(text), f"{path}: a reason raised as a string literal"
        for what in LAZY_SYNC.findall(text):
            found_sync += 1
            # The detail of HostRead names what reads ("item()", "printing a tensor"),
            # never a reason of its own: the row's message supplies that.
            assert len(what) <= 32 and not re.search(r"\b(reads?|host|break|trace)\b", what), (
                f"{path}: lazy::sync(\"{what}\") must name what reads (the HostRead detail), "
                f"not describe a reason")
    assert found_sync >= 3


def kinds():
    return {(b["kind"], b["phase"]): b["reason"] for b in kiln.explain().graph_breaks}


def test_bindings_raise_rows_with_their_phase(rng):
    x = kiln.from_numpy(rng.standard_normal(8).astype(np.float32))
    for _ in range(2):
        y = kiln.exp(x) * 2.0
        y.numpy()
        z = kiln.sin(x) * 3.0
        z.__dlpack__()
    found = kinds()
    assert found.get(("HostRead", "sync")) == "numpy() reads a value on the host", found
    assert found.get(("MemoryExport", "sync")) == (
        "__dlpack__() hands a tensor's memory to another library"), found
