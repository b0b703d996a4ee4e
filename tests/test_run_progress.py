"""The stack tests' wait for a run (run_progress.py): a run that keeps ending tasks is waited for past the
stall limit, one that ends none fails at it, and the cap holds whatever the progress."""

from __future__ import annotations

import itertools
import time

import pytest

import run_progress
from run_progress import RunStalled, ended_tasks, wait_while_moving


@pytest.fixture(autouse=True)
def read_progress_at_every_poll(monkeypatch):
    monkeypatch.setattr(run_progress, "PROGRESS_EVERY_S", 0.0)


def finishing_after(seconds: float):
    started = time.monotonic()
    return lambda: "success" if time.monotonic() - started > seconds else None


def test_a_run_that_keeps_ending_tasks_is_waited_for_past_the_stall_limit():
    counter = itertools.count()
    state = wait_while_moving("run", finishing_after(0.6), lambda: next(counter), interval_s=0.02, stall_s=0.2)
    assert state == "success"


def test_a_run_that_ends_no_task_fails_at_the_stall_limit():
    started = time.monotonic()
    with pytest.raises(RunStalled, match=r"no task ended for 0 s \(3 ended\)"):
        wait_while_moving("run", lambda: None, lambda: 3, interval_s=0.02, stall_s=0.2)
    assert 0.2 <= time.monotonic() - started < 2


def test_an_unanswered_progress_read_is_no_progress():
    with pytest.raises(RunStalled):
        wait_while_moving("run", lambda: None, lambda: None, interval_s=0.02, stall_s=0.2)


def test_the_cap_holds_while_tasks_keep_ending():
    counter = itertools.count()
    with pytest.raises(RunStalled, match="not finished after"):
        wait_while_moving("run", lambda: None, lambda: next(counter), interval_s=0.02, stall_s=0.2, cap_s=0.5)


def test_only_ended_states_count():
    tis = [{"state": s} for s in ("success", "failed", "skipped", "upstream_failed", "removed", "running",
                                  "up_for_reschedule", "deferred", None)]
    assert ended_tasks(tis) == 5
