"""Warmup and first-encounter bookkeeping (PROTOCOL.md sections 4 and 5).

The shapes a server has seen since it was (re)deployed live in the run directory, in
state/<engine>/shapes.json, so every task of the run (and a retry) sees the same history. The
deploy step calls `reset_shapes`; the first round of a shape not in the set is flagged
`first_encounter` and kept, warmup rounds included.
"""

from __future__ import annotations

from typing import Any

from tasks.config import RunConfig
from tasks.engines.context import EngineContext
from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.progress import Progress
from tasks.load.rounds import RoundPlan, run_round
from tasks.load.shards import shard_plan
from tasks.core.names import PERF_SCENARIOS
from tasks.state.storage import RunDir

WARMUP_SCENARIO = "warmup"


def _state(engine: str) -> str:
    from tasks.state.documents import warmed_shapes_doc

    return warmed_shapes_doc(engine)


def seen_shapes(run_dir: RunDir, engine: str) -> set[str]:
    doc = run_dir.read_json(_state(engine), default={}) or {}
    return set(doc.get("shapes", []))


def mark_seen(run_dir: RunDir, engine: str, shape: Shape) -> None:
    shapes = seen_shapes(run_dir, engine)
    if shape.key not in shapes:
        run_dir.write_json(_state(engine), {"shapes": sorted(shapes | {shape.key})})


def reset_shapes(run_dir: RunDir, engine: str) -> None:
    """Forget every shape: the server was (re)deployed and has compiled nothing yet."""
    run_dir.write_json(_state(engine), {"shapes": []})


def is_first_encounter(run_dir: RunDir, engine: str, shape: Shape) -> bool:
    return shape.key not in seen_shapes(run_dir, engine)


def scenario_shapes(config: RunConfig, scenario: str) -> list[Shape]:
    """The shapes one performance scenario runs, in order."""
    s = getattr(config.scenarios, scenario)
    if scenario == "rate":
        return [Shape(s.input_tokens, s.output_tokens, rate_rps=float(r)) for r in s.rates]
    return [Shape(s.input_tokens, s.output_tokens, c) for c in s.concurrency]


def run_shapes(config: RunConfig) -> list[Shape]:
    """The warmup matrix: every shape of every enabled performance and traffic scenario, without repeats."""
    from tasks.scenarios.traffic_shapes import traffic_shapes

    out: list[Shape] = []
    for name in PERF_SCENARIOS:
        if getattr(config.scenarios, name).enabled:
            out += [s for s in scenario_shapes(config, name) if s not in out]
    return out + [s for s in traffic_shapes(config) if s not in out]  # the traffic scenarios' own shapes, bucketed


def warmup_requests(shape: Shape) -> int:
    """Two waves at the shape's concurrency: the batch fills, then drains (at least 4 requests)."""
    if shape.rate_rps is not None:
        return max(4, min(16, round(shape.rate_rps * 4)))
    return max(2 * (shape.concurrency or 0), 4)


def run_warmup(ctx: EngineContext, shapes: list[Shape] | None = None, launch: int = 0,
               scenario: str | None = None) -> dict[str, Any]:
    """Run one warmup round per shape (default: the run's matrix) and mark each shape seen.

    Rows go to the `warmup` partition with scenario "warmup", round = the shape's place in the
    matrix, warmup=True; they are kept but never headline figures. A relaunch of a performance
    `scenario` (launch > 0) warms its shapes in a partition of its own, its rounds numbered after
    the engine's earlier warmup rounds.
    """
    engine = ctx.endpoint.engine
    if not ctx.config.scenarios.warmup:
        return {"engine": engine, "skipped": "scenarios.warmup is false", "shapes": []}
    shapes = run_shapes(ctx.config) if shapes is None else list(shapes)
    partition, first_round = WARMUP_SCENARIO, 1
    if launch:
        partition = f"{WARMUP_SCENARIO}.{scenario}.launch{launch}"
        first_round += sum(1 for r in ctx.run_dir.read_rows("rounds", engine) if r.get("warmup"))
    progress = Progress(sum(warmup_requests(s) for s in shapes), f"{engine} warmup")

    async def main() -> list[dict[str, Any]]:
        out = []
        async with new_session(ctx.endpoint.adapter.keeps_alive_after_stream, ctx.endpoint.access) as session:
            with ctx.run_dir.rows("requests", engine, partition=partition) as req_rows, ctx.run_dir.rows(
                "rounds", engine, partition=partition
            ) as round_rows:
                for i, shape in enumerate(shapes, start=first_round):
                    plan = RoundPlan(
                        scenario=WARMUP_SCENARIO,
                        shape=shape,
                        round=i,
                        requests=warmup_requests(shape),
                        first_encounter=is_first_encounter(ctx.run_dir, engine, shape),
                        warmup=True,
                        launch=launch,
                        **shard_plan(ctx.config.load, shape, ctx.endpoint.base_url, warmup_requests(shape)),
                    )
                    outcome = await run_round(ctx, session, plan, req_rows, progress)
                    round_rows.write(outcome.row)
                    mark_seen(ctx.run_dir, engine, shape)
                    out.append(
                        {
                            "shape": shape.key,
                            "first_encounter": plan.first_encounter,
                            "status": outcome.row["status"],
                            "ttft_p99_s": outcome.row["ttft_p99_s"],
                            "requests_failed": outcome.row["requests_failed"],
                        }
                    )
        return out

    try:
        done = run_async(main())
    finally:
        progress.close()
    return {"engine": engine, "shapes": done}
