"""The performance scenarios: short sweep, 4K prefill, 1K decode, Poisson rate (PROTOCOL.md 3-5).

`run_perf(ctx, scenario)` runs every level (concurrency, or arrival rate for "rate") for the
configured rounds, streams request rows and writes one round row per round, and returns the
summary: per level, the median over rounds with the round values and a spread flag, and the
first-encounter round's P95/P99 TTFT beside it.
"""

from __future__ import annotations

import logging
from typing import Any

from tasks.context import StepContext
from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.progress import Progress
from tasks.load.rounds import RoundPlan, run_round
from tasks.load.stats import first_encounter_tail, over_rounds
from tasks.scenarios.warmup import PERF_SCENARIOS, is_first_encounter, mark_seen, scenario_shapes

log = logging.getLogger("dayone.load")


def _requests_per_round(ctx: StepContext, scenario: str, shape: Shape) -> int:
    s = getattr(ctx.config.scenarios, scenario)
    if scenario == "rate":
        return s.requests_per_round
    return s.requests_for(shape.concurrency)


def run_perf(ctx: StepContext, scenario: str) -> dict[str, Any]:
    if scenario not in PERF_SCENARIOS:
        raise ValueError(f"scenario {scenario!r} is not a performance scenario (use one of {', '.join(PERF_SCENARIOS)})")
    settings = getattr(ctx.config.scenarios, scenario)
    engine = ctx.endpoint.engine
    shapes = scenario_shapes(ctx.config, scenario)
    total = sum(_requests_per_round(ctx, scenario, s) for s in shapes) * settings.rounds
    progress = Progress(total, f"{engine} {scenario}")
    # Seed of the Poisson arrivals: the config's, so a rate round is the same schedule every run.
    seed = getattr(settings, "seed", None)
    # The warmup may have taken each shape's first encounter: its round is the first-encounter tail.
    warmup_rounds = [r for r in ctx.run_dir.read_rows("rounds", engine) if r.get("warmup")]

    async def main() -> list[dict[str, Any]]:
        levels = []
        async with new_session(ctx.endpoint.adapter.keeps_alive_after_stream) as session:
            with ctx.run_dir.rows("requests", engine, partition=scenario) as req_rows, ctx.run_dir.rows(
                "rounds", engine, partition=scenario
            ) as round_rows:
                for shape in shapes:
                    rounds, usage_missing = [], 0
                    for n in range(1, settings.rounds + 1):
                        plan = RoundPlan(
                            scenario=scenario,
                            shape=shape,
                            round=n,
                            requests=_requests_per_round(ctx, scenario, shape),
                            first_encounter=is_first_encounter(ctx.run_dir, engine, shape),
                            arrival_seed=None if seed is None else f"{seed}/{shape.key}/r{n}",
                        )
                        outcome = await run_round(ctx, session, plan, req_rows, progress)
                        round_rows.write(outcome.row)
                        mark_seen(ctx.run_dir, engine, shape)
                        rounds.append(outcome.row)
                        usage_missing += _usage_missing(outcome.results)
                    levels.append(level_summary(shape, rounds, usage_missing, warmup_rounds))
        return levels

    try:
        levels = run_async(main())
    finally:
        progress.close()
    return {"engine": engine, "scenario": scenario, "levels": levels}


def _usage_missing(results: list[Any]) -> int:
    return sum(1 for r in results if r.status == "ok" and not r.usage_present)


def level_summary(shape: Shape, rounds: list[dict[str, Any]], usage_missing: int = 0,
                  warmup_rounds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One level's summary: headline figures as medians over rounds, with every round's value."""
    out: dict[str, Any] = {
        "concurrency": shape.concurrency,
        "rate_rps": shape.rate_rps,
        "input_tokens": shape.input_tokens,
        "output_tokens": shape.output_tokens,
        "rounds": [
            {k: r.get(k) for k in ("round", "status", "first_encounter", "requests_ok", "requests_failed", "error_rate")}
            for r in rounds
        ],
        "figures": over_rounds(rounds),
        "first_encounter": first_encounter_tail(rounds, warmup_rounds or ()),
        "failed_rounds": sum(1 for r in rounds if r.get("status") == "failed"),
        "length_deviations": sum(r.get("length_deviations") or 0 for r in rounds),
    }
    if usage_missing:
        out["usage_note"] = (
            f"{usage_missing} completed requests streamed no usage: completion tokens, TPOT and "
            "output TPS are unknown for them (recorded as null, not guessed)"
        )
    return out
