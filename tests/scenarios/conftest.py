"""Fixtures: a capacity search over DayOne's simulator, or over rounds of known goodput shares."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import tasks.scenarios.capacity as capacity
from capacity_helpers import Result, capacity_context
from tasks.load.rounds import RoundOutcome


@pytest.fixture()
def capacity_ctx(tmp_path: Path):
    """Factory: `with capacity_ctx({"decode_knee": 12}, {"start": 3}) as (sim, ctx): ...`."""
    return lambda *args, **kwargs: capacity_context(tmp_path, *args, **kwargs)


@pytest.fixture()
def rounds_of_shares(monkeypatch: pytest.MonkeyPatch):
    """Replace the engine: each round at a load has the good share `shares(load, round)` (None: the engine
    is gone, no request connects); returns the (load, round) pairs measured."""
    sent: list[tuple[float, int]] = []

    def install(shares: Callable[[float, int], float | None]) -> list[tuple[float, int]]:
        async def fake_round(ctx, session, plan, request_rows, progress=None):
            load = plan.shape.rate_rps if plan.shape.rate_rps is not None else plan.shape.concurrency
            sent.append((load, plan.round))
            share = shares(load, plan.round)
            good = round(share * plan.requests) if share is not None else 0
            results = [Result(i < good, gone=share is None) for i in range(plan.requests)]
            keys = ctx.endpoint.row_keys(plan.scenario, plan.round)
            for i, r in enumerate(results):
                request_rows.write({**keys, "concurrency": plan.shape.concurrency, "rate_rps": plan.shape.rate_rps,
                                    "first_encounter": False, **r.row_fields(), "request_id": f"{load}-{plan.round}-{i}"})
            row = {**keys, "concurrency": plan.shape.concurrency, "rate_rps": plan.shape.rate_rps,
                   "warmup": plan.warmup, "status": "ok", "requests_ok": plan.requests, "requests_failed": 0}
            return RoundOutcome(row, results)

        monkeypatch.setattr(capacity, "run_round", fake_round)
        return sent

    return install
