"""Test counts of JUnit XML reports (GoogleTest's, pytest's) for the GPU run summaries
(scripts/gpu_run.sh, python_bindings/gpu_pytest.sh): per report the tests, passed,
failed and skipped, the first failures, how many CUDA cases ran (and of them the CUDA
legs of the pytest suite: ids with the `cuda` parameter), and the skips by suite and
reason. Usage: python3 scripts/junit_summary.py REPORT.xml..."""

import re
import sys
import xml.etree.ElementTree as ET


def is_cuda_leg(case):
    """A CUDA leg: the `cuda` parameter of the cuda_leg fixture in the case's id."""
    return re.search(r"[\[-]cuda[\]-]", case.get("name", "")) is not None


def is_cuda_case(case):
    """A CUDA leg, or a case of a suite named for CUDA (test_cuda*.py, Cuda* gtests)."""
    suite = case.get("classname", "").lower()
    return is_cuda_leg(case) or ("cuda" in suite and "cuda_legs" not in suite)


def summarize(path):
    """Prints the counts of one report."""
    name = path.rsplit("/", 1)[-1]
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"{name}: no report ({e.__class__.__name__})")
        return
    cases = list(root.iter("testcase"))
    failed = [c for c in cases if c.find("failure") is not None or c.find("error") is not None]
    skipped = [c for c in cases if c.find("skipped") is not None
               or c.get("result") == "skipped" or c.get("status") == "notrun"]
    passed = len(cases) - len(failed) - len(skipped)
    print(f"{name}: {len(cases)} tests, {passed} passed, {len(failed)} failed, "
          f"{len(skipped)} skipped")
    for c in failed[:15]:
        print(f"  FAILED {c.get('classname')}.{c.get('name')}")
    # That the CUDA cases ran, not skipped.
    failed_ids, skipped_ids = {id(c) for c in failed}, {id(c) for c in skipped}
    cuda = [c for c in cases if is_cuda_case(c)]
    legs = [c for c in cuda if is_cuda_leg(c)]
    for label, group in (("CUDA cases", cuda), ("of them CUDA legs ([cuda] ids)", legs)):
        if not group:
            continue
        n_failed = sum(id(c) in failed_ids for c in group)
        n_skipped = sum(id(c) in skipped_ids for c in group)
        n_ran = len(group) - n_skipped
        print(f"  {label}: {n_ran} ran ({n_ran - n_failed} passed, {n_failed} failed), "
              f"{n_skipped} skipped{'  <-- none ran' if n_ran == 0 else ''}")
    # Which suites skipped and why (a CUDA test that still skips here is a problem).
    by_reason = {}
    for c in skipped:
        s = c.find("skipped")
        why = (s.get("message") or s.text or "") if s is not None else ""
        key = (c.get("classname", "").rsplit(".", 1)[-1].split("/")[0],
               re.sub(r"\S*/", "", " ".join(why.split()))[:70])
        by_reason[key] = by_reason.get(key, 0) + 1
    for (suite, why), n in sorted(by_reason.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  skipped {n:4d}  {suite}: {why}")


if __name__ == "__main__":
    for report in sys.argv[1:]:
        summarize(report)
