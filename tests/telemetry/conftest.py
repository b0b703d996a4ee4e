"""Fixtures: fast gauge sampling (rounds here last a fraction of a second) and simulators that always stop."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tasks.telemetry import engine_metrics
from tasks.sim.process import SimProcess, start_sim


@pytest.fixture(autouse=True)
def fast_gauge_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_metrics, "GAUGE_SAMPLE_INTERVAL_S", 0.02)


@pytest.fixture
def sims() -> Iterator[Any]:
    started: list[SimProcess] = []

    def start(dialect: str, profile: dict[str, Any] | None = None) -> SimProcess:
        sim = start_sim(dialect, profile)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()
