"""The real-scheduler stacks (tests/ui, tests/distributed) wait more than they compute: their processes run at
a lower CPU priority, so they take the cores the other workers leave idle and never a core from a test that
times requests beside them (`make test` gives each stack a worker of its own: tests/xdist_units.py)."""

from __future__ import annotations

import os
from collections.abc import Callable

# nice 10 weighs about a tenth of nice 0 (Linux CFS): a stack beside a busy worker gets a tenth of a core,
# not half, and all of a core nothing else wants
STACK_NICENESS = 10


def lower_priority(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A preexec_fn: the child and everything it starts run at STACK_NICENESS, then `then` (e.g. a setuid)."""

    def preexec() -> None:
        os.nice(STACK_NICENESS)
        if then is not None:
            then()

    return preexec


def lower_priority_of(pid: int) -> None:
    """Lower a running child's priority (one started by code that takes no preexec_fn). Linux keeps a nice
    value per thread, and a thread starts with its creator's: every thread it has now, so all it starts later."""
    niceness = min(19, os.getpriority(os.PRIO_PROCESS, 0) + STACK_NICENESS)
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.setpriority(os.PRIO_PROCESS, int(tid), niceness)
