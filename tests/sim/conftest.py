"""Start simulators for a test and always stop them afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tasks.sim.process import SimProcess, start_sim


@pytest.fixture
def sims() -> Iterator[Any]:
    started: list[SimProcess] = []

    def start(dialect: str = "sglang", profile: dict[str, Any] | None = None, **kwargs: Any) -> SimProcess:
        sim = start_sim(dialect, profile, **kwargs)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()
