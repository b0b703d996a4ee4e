"""A step's load as it goes: requests done of planned, failed, output tokens/s so far, elapsed and what is left.

`advance` runs on the timing loop, so it only counts (PROTOCOL.md section 8: the timing loop stamps and queues,
nothing else). A thread of its own reads the counts every SNAPSHOT_EVERY_S: it hands them to the step being run
(tasks/core/progress.py current: its progress documents, tasks/state/progress.py), which the live views and the report tab read, and every
LOG_EVERY_S it logs them as one line, so a task log or a pipe gets a few lines a minute, never one a request.
The terminal's live view (tasks/cli/live.py) draws the same numbers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tasks.core import progress as step_progress
from tasks.core.progress import LoadProgress

if TYPE_CHECKING:
    from tasks.load.client import RequestResult

log = logging.getLogger("dayone.load")

SNAPSHOT_EVERY_S = 2.0  # the progress document: fresh enough for a live view, cheap for the run's storage
LOG_EVERY_S = 20.0  # a log line: three a minute


class Progress:
    def __init__(self, total: int, label: str, log_every_s: float = LOG_EVERY_S,
                 snapshot_every_s: float = SNAPSHOT_EVERY_S, clock: Callable[[], float] = time.monotonic,
                 background: bool = True):
        self.total, self.label, self.log_every_s, self.snapshot_every_s = total, label, log_every_s, snapshot_every_s
        self.done = self.failed = 0
        self.output_tokens: int | None = None
        self.round = ""
        self._clock = clock
        self._started = self._last_log = clock()
        self._published = -1  # the count last handed to the progress document
        self._tracker = step_progress.current()
        self._stop = threading.Event()
        self._thread = None
        if background:
            self._thread = threading.Thread(target=self._run, name=f"progress {label}", daemon=True)
            self._thread.start()

    def advance(self, ok: bool, detail: str = "", output_tokens: int | None = None) -> None:
        """One request answered (or failed); `detail` names its round, `output_tokens` what it generated."""
        self.done += 1
        self.failed += 0 if ok else 1
        if output_tokens is not None:
            self.output_tokens = (self.output_tokens or 0) + output_tokens
        if detail:
            self.round = detail

    def answered(self, result: RequestResult, round_tag: str) -> None:
        """One request's result: its tokens as the engine's usage counts them, else its stream's output events."""
        tokens = result.completion_tokens if result.completion_tokens is not None else result.output_events
        self.advance(result.status == "ok", round_tag, tokens)

    def snapshot(self) -> LoadProgress:
        return LoadProgress(label=self.label, round=self.round, planned=self.total, done=self.done,
                            failed=self.failed, output_tokens=self.output_tokens,
                            elapsed_s=self._clock() - self._started)

    def tick(self) -> None:
        """What the thread does every SNAPSHOT_EVERY_S: the document when the counts moved, the log line when due."""
        now = self._clock()
        if self._tracker is not None and self.done != self._published:
            self._published = self.done
            self._tracker.load(self.snapshot())
        if now - self._last_log >= self.log_every_s:
            self._last_log = now
            log.info("%s: %s", self.label, self.snapshot().line())

    def _run(self) -> None:
        while not self._stop.wait(self.snapshot_every_s):
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001  (watching must never stop the load)
                log.debug("progress of %s: %s", self.label, exc)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._tracker is not None:
            self._tracker.load(self.snapshot())
        log.info("%s: %s", self.label, self.snapshot().line())
