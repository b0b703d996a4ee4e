"""The real-scheduler stacks (tests/ui, tests/distributed) each keep nearly a core busy while their run lasts
(bench/RESULTS.md): their processes run at a lower CPU priority, so they take what the other workers leave
and never a core from a test that times requests beside them (`make test` gives each stack a worker of its
own: tests/xdist_units.py).

Linux shares the CPU between sessions (autogroups) before it shares it between processes: a process that
starts a session of its own, as every stack component and engine does (for its process-group stop), weighs
as much as all the test workers together, whatever its own nice value. So the stack's processes carry
STACK_MARKER in their environment, and while `BackgroundPriority` is open a thread lowers the nice of each
one it finds, and of its session's autogroup when that is not ours.
"""

from __future__ import annotations

import contextlib
import os
import threading

STACK_MARKER = "DAYONE_TEST_STACK"
# nice 10 weighs about a tenth of nice 0 (CFS): a stack beside a busy worker gets a tenth of a core, not half
STACK_NICENESS = 10
_MARKED = f"\0{STACK_MARKER}=1\0".encode()
# the nice value this process started with: what it lowers stays STACK_NICENESS below that, even once it has
# joined the background itself
_START_NICENESS = os.getpriority(os.PRIO_PROCESS, 0)


def stack_env() -> dict[str, str]:
    """The variables that mark a process, and all it starts, as part of a stack."""
    return {STACK_MARKER: "1"}


def lower_priority_of(pid: int) -> None:
    """`pid` at STACK_NICENESS: each of its threads (Linux keeps a nice value per thread, and a new thread
    starts with its creator's), and its session's autogroup when it has a session of its own."""
    niceness = min(19, _START_NICENESS + STACK_NICENESS)
    with contextlib.suppress(OSError):  # gone meanwhile, or no autogroups in this kernel
        if os.getsid(pid) != os.getsid(0):
            with open(f"/proc/{pid}/autogroup", "w") as autogroup:
                autogroup.write(str(niceness))
    for tid in _threads(pid):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, niceness)


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _marked(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return _MARKED in b"\0" + environ.read()
    except OSError:
        return False


class BackgroundPriority:
    """While open, every process whose environment carries STACK_MARKER=1 is lowered (lower_priority_of)
    within `look_s` of its start."""

    def __init__(self, look_s: float = 1.0) -> None:
        self.look_s = look_s
        self.lowered: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="stack-priority")

    def look(self) -> None:
        """One pass over the machine's processes."""
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in self.lowered and _marked(int(name)):
                lower_priority_of(int(name))
                self.lowered.add(int(name))

    def _run(self) -> None:
        while not self._stop.wait(self.look_s):
            self.look()

    def start(self) -> BackgroundPriority:
        self.look()
        self._thread.start()
        return self

    def __enter__(self) -> BackgroundPriority:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def join_the_background() -> None:
    """This process, and every process it starts from now on, below the test workers' CPU priority, for the
    rest of its life: a stack's worker once its stack is done (tests/xdist_units.py)."""
    if os.environ.get(STACK_MARKER) == "1":
        return
    os.environ.update(stack_env())  # /proc/PID/environ keeps the start's: the children carry the marker
    lower_priority_of(os.getpid())
    BackgroundPriority().start()  # never stopped: a daemon thread, gone with the process
