"""Rounds run through DayOne's own run_round, and the engine_rounds row each leaves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.rounds import RoundOutcome, RoundPlan, run_round
from tasks.state.storage import RunDir


def context(url: str, dialect: str, root: Path) -> EngineContext:
    cfg = parse_run_config({"run_id": "engine-metrics", "engines": [{"name": "eng", "dialect": dialect}]})
    return EngineContext(cfg, endpoint_for(cfg, "eng", url, "sha256:" + "0" * 64), RunDir("engine-metrics", root=root))


def one_round(ctx: EngineContext, shape: Shape, requests: int, round_: int = 1) -> RoundOutcome:
    plan = RoundPlan(scenario="short", shape=shape, round=round_, requests=requests, first_encounter=False)

    async def go() -> RoundOutcome:
        async with new_session(ctx.endpoint.adapter.keeps_alive_after_stream) as session:
            with ctx.run_dir.rows("requests", ctx.endpoint.engine, f"short-r{round_}") as out:
                return await run_round(ctx, session, plan, out)

    return run_async(go())


def engine_row(ctx: EngineContext, round_: int = 1) -> dict[str, Any]:
    rows = [r for r in ctx.run_dir.read_rows("engine_rounds", ctx.endpoint.engine) if r["round"] == round_]
    assert len(rows) == 1, rows
    return rows[0]
