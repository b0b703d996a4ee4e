"""tests/stack_priority.py: a marked process in a session of its own yields the CPU to one that is not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from stack_priority import STACK_NICENESS, BackgroundPriority, stack_env

SPIN = "import time\nt = time.time() + 30\nwhile time.time() < t: pass\n"


def _cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_marked_spinner_on_a_shared_core_gets_a_small_share_of_it():
    """Two CPU-bound processes, each in a session of its own (as every stack component is), on one core:
    alike they split it; with one marked and the watcher open, the marked one gets about a tenth. A nice
    value on the process alone changed nothing here, because each session is an autogroup of its own."""
    core = min(os.sched_getaffinity(0))
    procs = {}
    for name, extra in (("test", {}), ("stack", stack_env())):
        procs[name] = subprocess.Popen([sys.executable, "-c", SPIN], env={**os.environ, **extra},
                                       start_new_session=True)
        os.sched_setaffinity(procs[name].pid, {core})
    try:
        with BackgroundPriority(look_s=0.2) as lowering:
            # looked for on the clock: the watcher's thread may wait for a core well past its 0.2 s
            deadline = time.monotonic() + 10
            while procs["stack"].pid not in lowering.lowered and time.monotonic() < deadline:
                time.sleep(0.05)
            assert lowering.lowered >= {procs["stack"].pid} and procs["test"].pid not in lowering.lowered
            assert os.getpriority(os.PRIO_PROCESS, procs["stack"].pid) == min(19, STACK_NICENESS)
            before = {n: _cpu_s(p.pid) for n, p in procs.items()}
            time.sleep(3)
            used = {n: _cpu_s(p.pid) - before[n] for n, p in procs.items()}
        share = used["stack"] / (used["stack"] + used["test"])
        assert share < 0.25, used  # alike: about 0.5
        assert os.getpriority(os.PRIO_PROCESS, procs["test"].pid) == os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
