"""Times against a schedule, on a loaded machine: the round's start is fitted over all of them (their median
offset), so a stalled first request does not shift the others; what is left is each one's distance from its
due time. Tests then hold the typical distance tight and allow a stall or two."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def lateness(times: Sequence[float], due: Sequence[float]) -> list[float]:
    """Each time's distance from its due offset (seconds from the round's start), after fitting the start."""
    start = statistics.median(t - d for t, d in zip(times, due, strict=True))
    return [abs(t - start - d) for t, d in zip(times, due)]
