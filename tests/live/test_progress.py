"""A step's progress as it goes (tasks/state/progress.py, tasks/load/progress.py): the documents a live view and
the report tab read, written when a step starts and ends and while its load runs, and the log lines a task log
or a pipe gets: a few a minute, never one a request."""

from __future__ import annotations

import logging

import pytest

from tasks.load.progress import LOG_EVERY_S, Progress
from tasks.state.progress import read_progress, step_running
from tasks.state.storage import RunDir


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _drive(progress: Progress, clock: FakeClock, seconds: float, requests_per_s: float, tokens: int = 32,
           fail_every: int = 0, tick_every_s: float = 2.0) -> None:
    """Requests answered at a steady pace, the progress thread's tick every `tick_every_s`, on a fake clock."""
    step, next_tick, sent = 1.0 / requests_per_s, clock.now + tick_every_s, 0
    end = clock.now + seconds
    while clock.now < end:
        clock.now += step
        sent += 1
        progress.advance(not (fail_every and sent % fail_every == 0), f"short-c4-r{1 + sent // 50}", tokens)
        if clock.now >= next_tick:
            progress.tick()
            next_tick += tick_every_s


def test_a_load_logs_a_few_lines_a_minute_with_done_failed_rate_elapsed_and_left(caplog):
    clock = FakeClock()
    caplog.set_level(logging.INFO, logger="dayone.load")
    progress = Progress(total=1200, label="llamacpp short", clock=clock, background=False)
    _drive(progress, clock, seconds=120, requests_per_s=5, tokens=32, fail_every=100)  # 600 answers in 2 min
    progress.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "dayone.load"]
    # 600 requests in 120 s: one line every LOG_EVERY_S and the closing one, not 600
    assert len(lines) == 120 // LOG_EVERY_S + 1, lines
    assert LOG_EVERY_S >= 15, "a few lines a minute"
    last = lines[-1]
    assert last.startswith("llamacpp short: 600/1200 requests, 6 failed, "), last
    assert "160 output tok/s so far" in last  # 600 x 32 tokens in 120 s
    assert "2:00 elapsed" in last and "~2:00 left" in last  # half done in two minutes
    assert "(round short-c4-r13)" in last
    middle = lines[len(lines) // 2]
    done = int(middle.split(": ")[1].split("/")[0])
    assert 0 < done < 600, middle


def test_no_line_before_the_first_interval_and_none_per_request(caplog):
    clock = FakeClock()
    caplog.set_level(logging.INFO, logger="dayone.load")
    progress = Progress(total=50, label="e warmup", clock=clock, background=False)
    _drive(progress, clock, seconds=LOG_EVERY_S - 1, requests_per_s=2)
    assert not [r for r in caplog.records if r.name == "dayone.load"]


def test_the_step_document_carries_the_load_while_it_runs(tmp_path):
    run_dir = RunDir("run-a", root=tmp_path)
    clock = FakeClock()
    with step_running(run_dir, "short", ["llamacpp", "llamacpp-parallel4"]):
        [started] = {p.started for p in read_progress(run_dir)}
        assert [(p.engine, p.state, p.load) for p in read_progress(run_dir)] == [
            ("llamacpp", "running", None), ("llamacpp-parallel4", "running", None)]
        progress = Progress(total=48, label="llamacpp, llamacpp-parallel4 short", clock=clock, background=False)
        _drive(progress, clock, seconds=10, requests_per_s=2, tokens=10, fail_every=5)
        both = read_progress(run_dir)
        assert {p.load.done for p in both} == {20} and {p.load.failed for p in both} == {4}
        assert both[0].load.round == "short-c4-r1" and both[0].load.output_tps == pytest.approx(20.0, rel=0.1)
        progress.close()
    ended = read_progress(run_dir)
    assert {(p.engine, p.state) for p in ended} == {("llamacpp", "ok"), ("llamacpp-parallel4", "ok")}
    assert all(p.started == started and p.ended >= started for p in ended)
    assert "ok in 0:00, 4 of 20 requests failed" in ended[0].line()


def test_a_step_that_raises_ends_failed_with_its_error_desensitized(tmp_path):
    run_dir = RunDir("run-b", root=tmp_path)
    with pytest.raises(RuntimeError):
        with step_running(run_dir, "deploy", ["vllm"]):
            raise RuntimeError("no answer from http://10.1.2.3:8000 with token sk-abcdefghijklmnopqrstuvwx")
    [p] = read_progress(run_dir)
    assert p.state == "failed" and p.detail.startswith("RuntimeError: no answer from")
    assert "10.1.2.3" not in p.detail and "sk-abcdefghijklmnopqrstuvwx" not in p.detail
    assert p.line().startswith("vllm deploy: failed in 0:00: RuntimeError")


def test_a_recorded_step_is_running_until_its_outcome_is_written(tmp_path):
    from tasks.steps.context import NotAttempted
    from tasks.steps.execution import record

    run_dir = RunDir("run-c", root=tmp_path)
    seen = []

    def call():
        seen.append([(p.step, p.engine, p.state) for p in read_progress(run_dir)])
        return {}

    record(run_dir, "functional", "sim", call)
    assert seen == [[("functional", "sim", "running")]]
    with pytest.raises(NotAttempted):
        record(run_dir, "quality", "sim", lambda: (_ for _ in ()).throw(NotAttempted("engine not ready")))
    states = {p.step: (p.state, p.detail) for p in read_progress(run_dir)}
    assert states == {"functional": ("ok", ""), "quality": ("not_attempted", "engine not ready")}
