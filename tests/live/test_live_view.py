"""The terminal's view of a run (tasks/cli/live.py): a line per step as it ends; on a TTY the running steps
redrawn as bars with their load; elsewhere plain lines, each step's end once and what runs a few times a
minute, never a redraw."""

from __future__ import annotations

import io

from tasks.cli.live import HEARTBEAT_S, LiveView
from tasks.core.progress import LoadProgress, StepProgress

T0 = 1_000_000.0


class Run:
    """A run's progress documents as a source, moved by hand along a fake clock."""

    def __init__(self) -> None:
        self.now = T0
        self.steps: list[StepProgress] = []

    def __call__(self) -> list[StepProgress]:
        return [s.model_copy() for s in self.steps]

    def clock(self) -> float:
        return self.now


def _plan(run: Run) -> None:
    run.steps = [StepProgress(step="plan", started=T0, ended=T0 + 2, state="ok")]


def _short(run: Run, done: int, elapsed: float) -> None:
    load = LoadProgress(label="a, b short", round=f"short-c4-r{1 + done // 8}", planned=48, done=done,
                        failed=1 if done > 10 else 0, output_tokens=done * 32, elapsed_s=elapsed)
    run.steps = [s for s in run.steps if s.step != "short"] + [
        StepProgress(step="short", engine=e, started=T0 + 3, load=load) for e in ("a", "b")]


def test_a_pipe_gets_each_ended_step_once_and_what_runs_a_few_times_a_minute():
    run, out = Run(), io.StringIO()
    view = LiveView(run, out, tty=False, now=run.clock)
    _plan(run)
    for second in range(0, 180):  # three minutes polled every second
        run.now = T0 + second
        if second >= 3:
            _short(run, done=min(48, (second - 3) // 3), elapsed=second - 3)
        view.update()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue(), "no redraws on a pipe"
    assert lines[0] == "run plan: ok in 0:02"
    assert lines.count("run plan: ok in 0:02") == 1
    running = lines[1:]
    # one a HEARTBEAT_S (at 20, 40, ... 160 s), both engines' step in one line
    assert len(running) == len(range(int(HEARTBEAT_S), 180, int(HEARTBEAT_S))), running
    assert all(line.startswith("a, b short: running ") for line in running), running
    assert "48 requests, 1 failed, " in running[-1] and "output tok/s so far" in running[-1]
    assert "elapsed, ~" in running[-1] and "left (round short-c4-r" in running[-1]


def test_a_step_that_ends_gets_its_line_with_state_time_and_failures():
    run, out = Run(), io.StringIO()
    view = LiveView(run, out, tty=False, now=run.clock)
    _short(run, done=20, elapsed=40)
    view.update()
    for s in run.steps:
        s.state, s.ended = "ok", T0 + 45
    run.steps.append(StepProgress(step="deploy", engine="c", started=T0 + 1, ended=T0 + 4, state="failed",
                                  detail="RuntimeError: llama-server exited with 1\nTraceback..."))
    view.update()
    view.update()
    assert out.getvalue().splitlines() == [
        "c deploy: failed in 0:03: RuntimeError: llama-server exited with 1",
        "a short: ok in 0:42, 1 of 20 requests failed",
        "b short: ok in 0:42, 1 of 20 requests failed",
    ]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_running_step_as_a_bar_redrawn_in_place():
    run, out = Run(), Terminal()
    view = LiveView(run, out, now=run.clock)
    assert view.tty
    _plan(run)
    run.steps.append(StepProgress(step="functional", engine="a", started=T0 + 2))
    run.now = T0 + 14
    view.update()
    assert "run plan: ok in 0:02" in out.getvalue()
    assert "a functional: running 0:12" in out.getvalue()
    run.steps[-1].state, run.steps[-1].ended = "ok", T0 + 15
    _short(run, done=20, elapsed=30)
    run.now = T0 + 33
    view.update()
    drawn = out.getvalue()
    assert "a functional: ok in 0:13" in drawn
    assert "a, b short:" in drawn and "20/48 requests, 1 failed, 21 output tok/s, 0:30 elapsed, ~0:42 left" in drawn
    assert "\r" in drawn, "the bar is redrawn in place"
    view.__exit__(None, None, None)


def test_a_command_on_a_terminal_names_its_log_file_first_and_last_and_logs_into_it(tmp_path):
    import logging

    from tasks.cli.live import watched
    from tasks.state.storage import RunDir

    out, log_path = Terminal(), tmp_path / "bench.log"
    before = logging.getLogger().handlers[:]
    with watched(RunDir("r", root=tmp_path), lambda: log_path, "dayone bench", stream=out):
        logging.getLogger("dayone.load").info("sglang short: 20/48 requests, 0 failed")
        logging.getLogger("dayone.load").warning("the load client waited for a core")
    lines = [line for line in out.getvalue().replace("\r", "\n").splitlines() if line.strip()]
    assert lines[0] == lines[-1] == f"dayone bench: full log in {log_path}"
    assert "WARNING dayone.load: the load client waited for a core" in out.getvalue()
    assert "20/48 requests" not in out.getvalue(), "information goes to the file, the view shows progress"
    written = log_path.read_text()
    assert "sglang short: 20/48 requests, 0 failed" in written and "the load client waited" in written
    assert logging.getLogger().handlers == before, "the command's logging is as it was afterwards"
    piped = io.StringIO()
    with watched(RunDir("r", root=tmp_path), lambda: tmp_path / "unused.log", "dayone bench", stream=piped):
        pass
    assert piped.getvalue() == "" and not (tmp_path / "unused.log").exists(), "a pipe: nothing changes"
