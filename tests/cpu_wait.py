"""How loaded the machine was while a timing test ran: a test that missed a tight bound on a loaded
machine runs again (its figures are the client's and the server's waits for a core, not a bug)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tasks.load.shards import runqueue_wait_s

__all__ = ["ATTEMPTS", "LOADED", "cpu_pressure_s", "pressure_share", "runqueue_wait_s"]

# A timing test that missed on a loaded machine runs again, up to ATTEMPTS in all; loaded is some task
# waiting for a core more than LOADED of the try's time. A real bug misses on every try.
ATTEMPTS, LOADED = 3, 0.15


def cpu_pressure_s() -> float | None:
    """Seconds in which some task of the machine waited for a core (Linux PSI), or None without it."""
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return int(some.rsplit("total=", 1)[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return None


def pressure_share() -> Callable[[], float]:
    """From now: a function giving the share of the time since in which some task waited for a core (0 without
    PSI, so an unloaded reading never calls for another try)."""
    start, t0 = cpu_pressure_s(), time.monotonic()

    def share() -> float:
        now = cpu_pressure_s()
        return 0.0 if start is None or now is None else (now - start) / max(time.monotonic() - t0, 1e-9)

    return share
