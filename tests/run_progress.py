"""Waiting for a run on a real scheduler (tests/ui, tests/distributed): it fails when the run stops moving,
not at a fixed time. Those stacks run below the test workers' CPU priority (stack_priority.py), so a run's
wall time says how busy the machine was, not how the run went: on a fully loaded two-core machine the
local-sim preset's run once took more than 18 minutes while each of its tasks kept finishing. A run that
finishes no task for STALL_S is stuck, whatever the load; CAP_S bounds the whole wait all the same."""

from __future__ import annotations

import time
from collections.abc import Callable

STALL_S = 300.0  # no task of the run ended for this long: stuck (its longest task ends in about a minute alone)
CAP_S = 2400.0
PROGRESS_EVERY_S = 15.0  # the task list is read this often, not at every poll: a page of 60-odd tasks
ENDED = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


class RunStalled(AssertionError):
    pass


def ended_tasks(task_instances: list[dict]) -> int:
    """How many of the run's task instances (the REST API's) have ended."""
    return sum(1 for ti in task_instances if ti.get("state") in ENDED)


def wait_while_moving(what: str, final_state: Callable[[], str | None], tasks_ended: Callable[[], int | None],
                      interval_s: float, stall_s: float = STALL_S, cap_s: float = CAP_S) -> str:
    """final_state() every interval_s until it returns a state; tasks_ended() (None: unanswered) every
    PROGRESS_EVERY_S. RunStalled when no task ended for stall_s, or after cap_s in all."""
    started = moved = last_read = time.monotonic()
    ended = -1
    while True:
        state = final_state()
        if state is not None:
            return state
        now = time.monotonic()
        if now - last_read >= PROGRESS_EVERY_S:
            last_read = now
            count = tasks_ended()
            if count is not None and count > ended:
                ended, moved = count, now
        if now - moved > stall_s:
            raise RunStalled(f"{what}: no task ended for {stall_s:.0f} s ({max(ended, 0)} ended)")
        if now - started > cap_s:
            raise RunStalled(f"{what}: not finished after {cap_s:.0f} s ({max(ended, 0)} tasks ended)")
        time.sleep(interval_s)
