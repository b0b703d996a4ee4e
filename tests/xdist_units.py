"""How `make test` (pytest -n N --dist loadfile) shares the test files among its workers: the units of work,
their order, and how far ahead a worker is given one. tests/conftest.py registers these hooks.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

# Each worker builds its own session fixtures. A test file goes to one worker whole, so its module fixtures are
# built once; so does a directory whose session fixture is a whole run (report: `sim_run`) or a whole
# deployment (distributed: PostgreSQL, Redis, S3, Airflow's components and two Celery workers; ui: `make ui`'s
# stack, for the REST API's trigger form and the newcomer in the browser).
ONE_UNIT_DIRS = ("report", "distributed", "ui")
# Directories whose tests run a real Airflow scheduler (their conftests' ui_stack, distributed_stack): the
# longest units, and the ones that wait most (scheduler loops, a process per task) rather than compute.
STACK_DIRS = ("ui", "distributed")
# Units whose tests judge what was done, never how fast (no timed figure, no verdict on one, no bound on a
# wall time), and whose waits are generous: each may run below the test workers' CPU priority, on a stack's
# worker once its stack is done, in the CPU the test workers leave idle while they wait on their engines.
# They come last in the order, so that the stacks' workers find them there; among them the longest first
# (seconds on a fresh clone), so that the last unit to start is a short one and the workers end together.
BACKGROUND_UNITS = (
    "tests/state/test_shared_nothing.py",  # 128 s: where run state lives, each step in a fresh process
    "tests/independent/test_endpoint_access_plain.py",  # 66 s: the key and the CA reach the engine; no figure judged
    "tests/openwebui/test_openwebui_browser.py",  # 42 s: what a browser shows of a stored chat
    "tests/independent/test_openwebui_plain.py",  # 39 s: OpenWebUI's verdicts on plain servers, from its database
    "tests/layout/test_layers.py",  # 36 s
    "tests/k8s/test_k8s_openwebui.py",  # 32 s: the objects created and removed around the openwebui step
    "tests/test_dag_integrity.py",  # 27 s
    "tests/test_preload.py",  # 20 s
    "tests/reliability/test_fuzz_config.py",  # 14 s
    "tests/registry/test_pinning.py",  # 7 s
)


def _unit(nodeid: str) -> str:
    """The unit of work of a test for `--dist loadfile`: its file, or its directory in ONE_UNIT_DIRS."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 and parts[0] == "tests" and parts[1] in ONE_UNIT_DIRS else path


def _is_stack_unit(unit: str) -> bool:
    parts = unit.split("/")
    return len(parts) > 1 and parts[0] == "tests" and parts[1] in STACK_DIRS


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Workers take units in the order pytest_collection_modifyitems sorts them, with one unit queued ahead
    at most: a unit queued behind a long test is tied to that worker while another may idle, at the end of
    the run most of all. With two workers more than there are stack units (`make test`'s default: a worker
    per core plus one per stack), each stack unit has a worker of its own, which then stops: the others run
    the rest beside them, the stacks below them in CPU priority (tests/stack_priority.py). Once its stack is
    done, a stack's worker takes the BACKGROUND_UNITS still queued, and stops when none is left."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.dedicated: set[Any] = set()  # workers that run one stack unit, then background units only
            self.stack_units: set[str] | None = None  # once the collection is known

        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if self.stack_units is None:
                self.stack_units = {_unit(nodeid) for nodeid in self.collection if _is_stack_unit(_unit(nodeid))}
            if len(self.nodes) >= len(self.stack_units) + 2 and _is_stack_unit(next(iter(self.workqueue))):
                self.dedicated.add(node)
            super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            pending = self._pending_of(self.assigned_work[node])
            if not self.workqueue:
                node.shutdown()  # its last test runs once it knows none follows
            elif pending > 1:
                return
            elif node not in self.dedicated:
                # a worker runs a test once it knows the next one: the last test of a unit waits for another
                self._assign_work_unit(node)
            else:
                background = next((unit for unit in self.workqueue if unit in BACKGROUND_UNITS), None)
                if background is None:
                    node.shutdown()
                    return
                self.workqueue.move_to_end(background, last=False)
                self._assign_work_unit(node)

    return Scheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The units that run whole pipelines (those that need the Airflow DB) first: one of them left to the
    end keeps one worker busy while the other idles. Workers take units in this order."""
    # the longest: a real scheduler (`make ui`'s stack, the distributed Celery stack), one on each worker
    heavy = {_unit(item.nodeid) for item in items if "airflow_db" in item.fixturenames}

    def order(item: pytest.Item) -> tuple[bool, int, bool]:
        unit = _unit(item.nodeid)  # the background units last, for the stacks' workers, the longest first
        background = BACKGROUND_UNITS.index(unit) + 1 if unit in BACKGROUND_UNITS else 0
        return not _is_stack_unit(unit), background, unit not in heavy

    items.sort(key=order)  # stable: collection order within each part


_RAN_A_STACK = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a worker that ran a stack unit, a background unit runs below the test workers' CPU priority, and so
    does all this worker runs after it (its module fixtures included: this runs before them)."""
    unit = _unit(item.nodeid)
    if _is_stack_unit(unit):
        item.config.stash[_RAN_A_STACK] = True
    elif unit in BACKGROUND_UNITS and item.config.stash.get(_RAN_A_STACK, False):
        from stack_priority import join_the_background

        join_the_background()


class _WorkerTimes:
    """On the controller: each worker's time in tests and when it stopped, printed after the run, so a CI
    log says how long each worker idled at the end and how much of the wall time its tests filled."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.busy: dict[str, float] = {}
        self.stopped: dict[str, float] = {}
        # per worker, its units in the order they ran: [unit, seconds from the start at its first report, time]
        self.units: dict[str, list[list[Any]]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        worker = getattr(getattr(report, "node", None), "gateway", None)
        if worker is not None:
            self.busy[worker.id] = self.busy.get(worker.id, 0.0) + report.duration
            ran, unit = self.units.setdefault(worker.id, []), _unit(report.nodeid)
            if not ran or ran[-1][0] != unit:
                ran.append([unit, time.monotonic() - self.started, 0.0])
            ran[-1][2] += report.duration

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.stopped[node.gateway.id] = time.monotonic() - self.started

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.stopped:
            return
        end = max(self.stopped.values())
        terminalreporter.write_sep("-", "workers: time in tests, stopped at, idle before the last one stopped")
        for worker in sorted(self.stopped):
            busy, stopped = self.busy.get(worker, 0.0), self.stopped[worker]
            terminalreporter.write_line(f"{worker}: {busy:.0f} s in tests, stopped at {stopped:.0f} s, "
                                        f"idle {end - stopped:.0f} s at the end")
            # which units made a worker long: those of 30 s and more, from when they began
            long = [f"{unit} {seconds:.0f} s from {began:.0f} s" for unit, began, seconds in self.units.get(worker, [])
                    if seconds >= 30]
            if long:
                terminalreporter.write_line("    " + "; ".join(long))


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):  # xdist's controller
        config.pluginmanager.register(_WorkerTimes(), "dayone_worker_times")
