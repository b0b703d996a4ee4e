"""How loaded the machine was while a timing test ran: a test that missed a tight bound on a loaded
machine runs again (its figures are the client's and the server's waits for a core, not a bug)."""

from __future__ import annotations

from pathlib import Path

from tasks.load.shards import runqueue_wait_s

__all__ = ["cpu_pressure_s", "runqueue_wait_s"]


def cpu_pressure_s() -> float | None:
    """Seconds in which some task of the machine waited for a core (Linux PSI), or None without it."""
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return int(some.rsplit("total=", 1)[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return None
