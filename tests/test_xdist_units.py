"""`make test`'s scheduling (tests/xdist_units.py) on a small suite written for the test: which worker ran
which test, from a line each test writes.

The suite mirrors the real layout: tests/distributed (a quick test, then a long one) and tests/ui are stack
units, eight one-test files are the rest, and one more is a background unit.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent
LONG_S = 6  # the distributed unit's second test: the other worker runs the rest meanwhile
NORMAL = [f"tests/test_n{i}.py" for i in range(8)]
BACKGROUND = "tests/test_dag_integrity.py"  # a name from BACKGROUND_UNITS

CONFTEST = f"""
import json, os, sys, time
import pytest
sys.path.insert(0, {str(TESTS)!r})
from xdist_units import (  # noqa: F401
    pytest_collection_modifyitems, pytest_configure, pytest_runtest_setup, pytest_xdist_make_scheduler)

@pytest.fixture(autouse=True)
def _record(request):
    started = time.monotonic()
    yield
    with open(os.environ["RAN"], "a") as out:
        out.write(json.dumps({{"worker": os.environ["PYTEST_XDIST_WORKER"], "test": request.node.nodeid,
                              "started": started, "nice": os.getpriority(os.PRIO_PROCESS, 0),
                              "marked": os.environ.get("DAYONE_TEST_STACK")}}) + "\\n")
"""


def _suite(root: Path, long_s: float, normal_s: float) -> None:
    (root / "conftest.py").write_text(CONFTEST)
    for folder in ("tests/ui", "tests/distributed"):
        (root / folder).mkdir(parents=True)
    (root / "tests/ui/test_newcomer.py").write_text("def test_ui():\n    pass\n")
    (root / "tests/distributed/test_celery.py").write_text(
        f"import time\n\ndef test_a_quick():\n    pass\n\ndef test_b_long():\n    time.sleep({long_s})\n")
    for path in NORMAL:
        (root / path).write_text(f"import time\n\ndef test_it():\n    time.sleep({normal_s})\n")
    (root / BACKGROUND).write_text("def test_it():\n    pass\n")


def _run(tmp_path: Path, workers: int, long_s: float = LONG_S, normal_s: float = 0
         ) -> tuple[dict[str, list[str]], str, list[dict]]:
    """{worker: its tests' files, in the order it ran them}, pytest's output, and what each test recorded."""
    _suite(tmp_path, long_s, normal_s)
    ran = tmp_path / "ran.jsonl"
    # only xdist of the installed plugins: the others' loading cost each process 1-2 s of CPU and change nothing here
    env = {**os.environ, "RAN": str(ran), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    answer = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist.plugin",
                             "-n", str(workers),
                             "--dist", "loadfile", "--no-loadscope-reorder", "tests"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    lines = sorted((json.loads(line) for line in ran.read_text().splitlines()), key=lambda r: r["started"])
    by_worker: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        by_worker[line["worker"]].append(line["test"].split("::")[0])
    assert sorted(f for files in by_worker.values() for f in files) == sorted(
        ["tests/ui/test_newcomer.py", *["tests/distributed/test_celery.py"] * 2, *NORMAL, BACKGROUND])  # each once
    return by_worker, answer.stdout, lines


def test_two_workers_start_on_the_stack_units_and_queue_one_unit_ahead_at_most(tmp_path):
    by_worker, output, _ = _run(tmp_path, 2)
    [distributed] = [w for w, files in by_worker.items() if files[0] == "tests/distributed/test_celery.py"]
    [ui] = [w for w, files in by_worker.items() if files[0] == "tests/ui/test_newcomer.py"]
    assert distributed != ui
    # queued ahead while the long test ran: one file (two before), the other worker ran the rest meanwhile
    assert len([f for f in by_worker[distributed] if f in NORMAL]) == 1, dict(by_worker)
    # the run's end says how long each worker spent in tests and idled at the end
    times = dict(re.findall(r"^(gw\d+): (\d+) s in tests, stopped at \d+ s, idle \d+ s at the end$", output, re.M))
    assert set(times) == {distributed, ui} and int(times[distributed]) >= LONG_S, output


def test_with_two_workers_more_than_stack_units_each_stack_unit_has_a_worker_of_its_own(tmp_path):
    by_worker, _, _ = _run(tmp_path, 4, long_s=0)  # the assignment alone: no test needs to wait
    assert len(by_worker) == 4
    units = sorted(sorted(set(files) - {BACKGROUND}) for files in by_worker.values() if not set(files) & set(NORMAL))
    assert units == [["tests/distributed/test_celery.py"], ["tests/ui/test_newcomer.py"]], dict(by_worker)


def test_a_stack_s_worker_then_runs_the_background_units_below_the_others_cpu_priority(tmp_path):
    from stack_priority import STACK_NICENESS
    from xdist_units import BACKGROUND_UNITS

    assert BACKGROUND in BACKGROUND_UNITS
    assert all((TESTS.parent / unit).is_file() for unit in BACKGROUND_UNITS), "a renamed file leaves the list"
    # the other workers are still on the slow normal files when the stacks are done; the background file
    # comes last in the order, so only a stack's worker taking it out of turn runs it this early
    by_worker, _, lines = _run(tmp_path, 4, long_s=0, normal_s=0.5)
    [background] = [line for line in lines if line["test"].startswith(BACKGROUND)]
    assert by_worker[background["worker"]][0] in ("tests/ui/test_newcomer.py", "tests/distributed/test_celery.py")
    assert not set(by_worker[background["worker"]]) & set(NORMAL), dict(by_worker)
    start_nice = os.getpriority(os.PRIO_PROCESS, 0)
    assert background["nice"] == min(19, start_nice + STACK_NICENESS) and background["marked"] == "1", background
    assert all(line["nice"] == start_nice and line["marked"] is None for line in lines if line is not background), lines
