"""How far a step has got, in numbers and in one line: a step running or ended (StepProgress), the load it is
sending (LoadProgress), and where this process reports a load's progress (`current`, `reporting_to`).

The load client counts (tasks/load/progress.py) without knowing where its counts go; a step being run sets the
sink (tasks/state/progress.py writes them into the run's progress documents), and the live views
(tasks/cli/live.py) and the report tab (tasks/report/html.py render_progress) read them back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

RUNNING = "running"
# running, then the step's outcome (tasks/state/documents.py StepStatus)
ProgressState = Literal["running", "ok", "skipped", "failed", "not_attempted"]


class LoadProgress(BaseModel):
    """The requests a step has sent so far, over all its rounds."""

    model_config = ConfigDict(extra="ignore")

    label: str  # whose load: "llamacpp, llamacpp-parallel4 short"
    round: str = ""  # the round the latest answer belonged to, e.g. short-in64-out32-c4-r2
    planned: int
    done: int = 0
    failed: int = 0
    output_tokens: int | None = None  # of the answers so far, as reported (None: the step reports none)
    elapsed_s: float = 0.0

    @property
    def output_tps(self) -> float | None:
        if self.output_tokens is None or self.elapsed_s <= 0:
            return None
        return self.output_tokens / self.elapsed_s

    @property
    def left_s(self) -> float | None:
        """What is left at the pace so far; None before the first answer."""
        if not self.done:
            return None
        return max(self.planned - self.done, 0) * self.elapsed_s / self.done

    def line(self) -> str:
        """`20/48 requests, 0 failed, 51 output tok/s so far, 0:24 elapsed, ~0:33 left (round short-c4-r2)`"""
        tps = "" if self.output_tps is None else f", {self.output_tps:,.0f} output tok/s so far"
        left = "" if self.left_s is None else f", ~{clock(self.left_s)} left"
        where = f" (round {self.round})" if self.round else ""
        return (f"{self.done}/{self.planned} requests, {self.failed} failed{tps}, {clock(self.elapsed_s)} elapsed"
                f"{left}{where}")


class StepProgress(BaseModel):
    """One step of one engine (or of the run): running, or how it ended and when."""

    model_config = ConfigDict(extra="ignore")

    step: str
    engine: str | None = None
    state: ProgressState = RUNNING
    started: float  # Unix time
    ended: float | None = None
    detail: str = ""  # why it failed or was skipped, desensitized
    load: LoadProgress | None = None

    @property
    def who(self) -> str:
        return self.engine or "run"

    def elapsed_s(self, now: float | None = None) -> float:
        end = self.ended if self.ended is not None else (time.time() if now is None else now)
        return max(end - self.started, 0.0)

    def line(self, now: float | None = None, who: str | None = None) -> str:
        """The step in one line: `llamacpp short: ok in 0:42` / `llamacpp short: running 0:12, 20/48 requests, ...`
        (`who`: the engines of a step measuring several together, for one line of them all)."""
        head = f"{who or self.who} {self.step}:"
        if self.state == RUNNING:
            load = f", {self.load.line()}" if self.load else ""
            return f"{head} running {clock(self.elapsed_s(now))}{load}"
        detail = f": {_short(self.detail)}" if self.detail and self.state != "ok" else ""
        failed = f", {self.load.failed} of {self.load.done} requests failed" if self.load and self.load.failed else ""
        return f"{head} {self.state.replace('_', ' ')} in {clock(self.elapsed_s(now))}{failed}{detail}"


def clock(seconds: float) -> str:
    """0:42, 12:05, 1:02:03."""
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def _short(text: str, limit: int = 160) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


class LoadSink(Protocol):
    def load(self, load: LoadProgress) -> None: ...


_sinks: list[LoadSink] = []  # the steps this process is running, innermost last


def current() -> LoadSink | None:
    """Where a load sent now reports its progress: the step this process is running, if any."""
    return _sinks[-1] if _sinks else None


@contextmanager
def reporting_to(sink: LoadSink) -> Iterator[LoadSink]:
    """Loads started inside the block report to `sink`."""
    _sinks.append(sink)
    try:
        yield sink
    finally:
        _sinks.remove(sink)
