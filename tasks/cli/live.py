"""The terminal's view of a run while it goes (`make demo`, `dayone bench`, `dayone step`), drawn from the
run's progress documents (tasks/state/progress.py).

Every step gets one line when it ends: engine, step, state, time (and its failed requests, or why it failed).
On a TTY the steps running now stay below those lines as tqdm bars, redrawn every POLL_S: requests done of
planned, failed, output tokens/s so far, elapsed and what is left. Anywhere else (CI, a pipe) nothing is
redrawn: besides the ended steps' lines, what runs is said in one plain line every HEARTBEAT_S.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from tasks.core.progress import RUNNING, StepProgress, clock

log = logging.getLogger("dayone.cli")

POLL_S = 1.0
HEARTBEAT_S = 20.0  # a non-TTY's progress line: three a minute
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar:16}| {n_fmt}/{total_fmt} requests{postfix}"  # tqdm adds ", "
WAIT_FORMAT = "{desc}"

Key = tuple[str, float]  # (step, started): the engines of a step measured together share both


class LiveView:
    """`source()` gives the run's steps as they are now; `update()` draws what changed since the last call.
    As a context manager it updates from a thread of its own until the block ends, then once more."""

    def __init__(self, source: Callable[[], list[StepProgress]], stream: TextIO, tty: bool | None = None,
                 poll_s: float = POLL_S, heartbeat_s: float = HEARTBEAT_S, now: Callable[[], float] = time.time):
        self._source, self.stream, self.poll_s, self.heartbeat_s, self._now = source, stream, poll_s, heartbeat_s, now
        self.tty = stream.isatty() if tty is None else tty
        self._printed: set[tuple[str, str | None, float]] = set()
        self._bars: dict[Key, Any] = {}
        self._last_heartbeat = now()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ---- drawing ----

    def update(self) -> None:
        try:
            steps = self._source()
        except Exception as exc:  # noqa: BLE001  (the run's storage busy or gone: the next poll may read it)
            log.debug("progress not read: %s", exc)
            return
        now = self._now()
        with self._lock:
            ended = sorted((p for p in steps if p.state != RUNNING), key=lambda p: p.ended or p.started)
            for p in ended:
                if (p.step, p.engine, p.started) not in self._printed:
                    self._printed.add((p.step, p.engine, p.started))
                    self._line(p.line(now))
            running: dict[Key, list[StepProgress]] = {}
            for p in steps:
                if p.state == RUNNING:
                    running.setdefault((p.step, p.started), []).append(p)
            if self.tty:
                self._draw_bars(running, now)
            elif running and now - self._last_heartbeat >= self.heartbeat_s:
                self._last_heartbeat = now
                for group in running.values():
                    self._line(group[0].line(now, who=_who(group)))

    def _line(self, text: str) -> None:
        if self.tty:
            from tqdm import tqdm

            tqdm.write(text, file=self.stream)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def _draw_bars(self, running: dict[Key, list[StepProgress]], now: float) -> None:
        from tqdm import tqdm

        for key in [k for k in self._bars if k not in running]:
            self._bars.pop(key).close()
        for key, group in running.items():
            p, load = group[0], group[0].load
            bar = self._bars.get(key)
            wanted = BAR_FORMAT if load else WAIT_FORMAT
            if bar is not None and bar.bar_format != wanted:  # the step's load began
                self._bars.pop(key).close()
                bar = None
            if bar is None:
                bar = self._bars[key] = tqdm(total=load.planned if load else None, desc=f"{_who(group)} {p.step}",
                                             file=self.stream, leave=False, dynamic_ncols=True, bar_format=wanted,
                                             mininterval=0)
            if load is None:
                bar.set_description_str(f"{_who(group)} {p.step}: running {clock(p.elapsed_s(now))}", refresh=False)
            else:
                bar.total = load.planned
                bar.n = load.done
                tps = "-" if load.output_tps is None else f"{load.output_tps:,.0f}"
                left = "" if load.left_s is None else f", ~{clock(load.left_s)} left"
                bar.set_postfix_str(f"{load.failed} failed, {tps} output tok/s, {clock(load.elapsed_s)} elapsed"
                                    f"{left}" + (f" ({load.round})" if load.round else ""), refresh=False)
            bar.refresh()

    # ---- running beside the run ----

    def __enter__(self) -> LiveView:
        self._thread = threading.Thread(target=self._run, name="live view", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.update()
        with self._lock:
            for bar in self._bars.values():
                bar.close()
            self._bars.clear()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.update()


def _who(group: list[StepProgress]) -> str:
    return ", ".join(p.who for p in group)


class _AboveBars(logging.StreamHandler):
    """A record written with tqdm.write: above the bars, which are drawn again below it."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001
            self.handleError(record)


@contextmanager
def logs_to_file(path: Path, stream: TextIO, on_terminal: int = logging.WARNING) -> Iterator[Path]:
    """While a live view draws on a terminal: every log record to `path`, only those at `on_terminal` and above
    on the terminal too, written above the view's bars."""
    root = logging.getLogger()
    path.parent.mkdir(parents=True, exist_ok=True)
    to_file = logging.FileHandler(path, encoding="utf-8")
    to_file.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    shown = _AboveBars(stream)
    shown.setLevel(on_terminal)
    shown.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    before, level = root.handlers[:], root.level
    root.handlers[:] = [to_file, shown]
    root.setLevel(min(level, logging.INFO) if level else logging.INFO)
    try:
        yield path
    finally:
        root.handlers[:] = before
        root.setLevel(level)
        to_file.close()


@contextmanager
def watched(run_dir: Any, log_path: Callable[[], Path], what: str, stream: TextIO | None = None) -> Iterator[None]:
    """A command's live view of `run_dir` (a RunDir) on a terminal, its full log in `log_path()`, named when it
    starts and when it ends. Not on a terminal nothing changes: its log lines, progress lines among them, say
    how it goes."""
    import sys

    from tasks.state.progress import read_progress

    stream = stream or sys.stderr
    if not stream.isatty():
        yield
        return
    path = log_path()
    print(f"{what}: full log in {path}", file=stream, flush=True)
    try:
        with logs_to_file(path, stream), LiveView(lambda: read_progress(run_dir), stream):
            yield
    finally:
        print(f"{what}: full log in {path}", file=stream, flush=True)
