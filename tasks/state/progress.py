"""How far a run has got, for whoever watches it while it runs, as documents of the run: each step's start
and end, and the load a step is sending (tasks/load/progress.py; the models: tasks/core/progress.py). The live
views of `make demo`, `dayone bench` and `dayone step` (tasks/cli/live.py) and the report tab opened before the
report exists (plugins/dayone_airflow/links.py) read them. The report never does: these are running counts, not measured figures.

    progress/<engine>-<step>.json   (a run-level step: progress/<step>.json)

A document is written only by the process running its step, so no two processes write the same one, and a
write that fails is logged and dropped: watching a run must never fail it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tasks.core import progress as core_progress
from tasks.core.desensitize import desensitize
from tasks.core.progress import RUNNING, LoadProgress, ProgressState, StepProgress
from tasks.state.documents import PROGRESS_DIR, progress_doc, progress_listed
from tasks.state.storage import RunDir

log = logging.getLogger("dayone.progress")

def read_progress(run_dir: RunDir) -> list[StepProgress]:
    """Every step's progress document of the run, in the order the steps started."""
    found = []
    for name in run_dir.names(PROGRESS_DIR):
        try:
            doc = run_dir.read_json(progress_listed(name)) if name.endswith(".json") else None
            if doc:
                found.append(StepProgress.model_validate(doc))
        except (OSError, ValueError) as exc:  # a document being replaced, or not one of ours
            log.debug("progress %s unreadable: %s", name, exc)
    return in_start_order(found)


def in_start_order(steps: list[StepProgress]) -> list[StepProgress]:
    return sorted(steps, key=lambda p: (p.started, p.who, p.step))


class StepTracker:
    """The progress documents of one step run in this process, one per engine it runs for."""

    def __init__(self, run_dir: RunDir, step: str, engines: list[str | None]):
        self.run_dir, self.step = run_dir, step
        started = time.time()
        self._docs = {e: StepProgress(step=step, engine=e, started=started) for e in engines}
        self._lock = threading.Lock()  # the load's snapshots come from a thread of their own
        for e in engines:
            self._write(e)

    def covers(self, step: str, engine: str | None) -> bool:
        return step == self.step and engine in self._docs

    def load(self, load: LoadProgress) -> None:
        """The step's load so far (each engine of a step that measures engines together sees the same)."""
        for e, doc in self._docs.items():
            if doc.state == RUNNING:
                doc.load = load
                self._write(e)

    def end(self, engine: str | None, state: ProgressState, detail: str = "") -> None:
        doc = self._docs.get(engine)
        if doc is None or doc.state != RUNNING:
            return
        doc.state, doc.ended, doc.detail = state, time.time(), desensitize(detail)
        self._write(engine)
        (log.warning if state == "failed" else log.info)("%s", doc.line())

    def running(self) -> list[str | None]:
        return [e for e, d in self._docs.items() if d.state == RUNNING]

    def _write(self, engine: str | None) -> None:
        doc = self._docs[engine]
        try:
            with self._lock:
                self.run_dir.write_json(progress_doc(self.step, engine), doc.model_dump(mode="json"))
        except Exception as exc:  # noqa: BLE001  (progress is for watching; the step goes on without it)
            log.warning("progress of %s %s not written: %s", doc.who, self.step, desensitize(str(exc)))


@contextmanager
def step_running(run_dir: RunDir, step: str, engines: list[str | None]) -> Iterator[StepTracker]:
    """The step is running for `engines` until the block ends: ok when it returns, failed when it raises,
    unless the block ended an engine itself (tracker.end). Inside a step already running for these engines
    (a step measuring engines together records each engine's outcome in turn), that step's tracker."""
    outer = core_progress.current()
    if isinstance(outer, StepTracker) and all(outer.covers(step, e) for e in engines):
        yield outer
        return
    tracker = StepTracker(run_dir, step, engines)
    log.info("%s %s: started", ", ".join(e or "run" for e in engines), step)
    try:
        with core_progress.reporting_to(tracker):
            yield tracker
    except BaseException as exc:
        for e in tracker.running():
            tracker.end(e, "failed", f"{type(exc).__name__}: {exc}")
        raise
    for e in tracker.running():
        tracker.end(e, "ok")


def step_skipped(run_dir: RunDir, step: str, engine: str | None, reason: str) -> None:
    """A step that did not run (switched off in the run config): ended as it started."""
    StepTracker(run_dir, step, [engine]).end(engine, "skipped", reason)
