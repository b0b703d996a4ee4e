"""The performance scenarios: short sweep, 4K prefill, 1K decode, Poisson rate (PROTOCOL.md 3-5).

`run_perf(ctx, scenario)` runs every level (concurrency, or arrival rate for "rate") for the
configured rounds, streams request rows and writes one round row per round, and returns the
summary: per level, the median over rounds with the round values and a spread flag, and the
first-encounter round's P95/P99 TTFT beside it. `run_perf_interleaved` does the same for engines
that are up together, alternating their rounds (ABBA) so their round values pair.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from tasks.context import StepContext
from tasks.experiment import round_order
from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.progress import Progress
from tasks.load.rounds import RoundPlan, run_round
from tasks.load.shards import shard_plan
from tasks.load.stats import first_encounter_tail, over_rounds
from tasks.scenarios.warmup import PERF_SCENARIOS, is_first_encounter, mark_seen, scenario_shapes

log = logging.getLogger("dayone.load")


def _requests_per_round(ctx: StepContext, scenario: str, shape: Shape) -> int:
    s = getattr(ctx.config.scenarios, scenario)
    if scenario == "rate":
        return s.requests_per_round
    return s.requests_for(shape.concurrency)


def run_perf(ctx: StepContext, scenario: str) -> dict[str, Any]:
    """One engine's scenario: every level, its rounds one after another."""
    return run_perf_interleaved([ctx], scenario)[ctx.endpoint.engine]


def run_perf_interleaved(ctxs: list[StepContext], scenario: str) -> dict[str, dict[str, Any]]:
    """The scenario on engines that are up together, round by round in turn: for each level, repetition n
    measures every engine once, forward on odd n and backward on even n (ABBA, tasks/experiment.py), so
    slow drift and a noisy neighbour hit every engine alike and round n of each engine forms a pair.
    Returns each engine's summary; with one engine this is the plain sequential scenario."""
    if scenario not in PERF_SCENARIOS:
        raise ValueError(f"scenario {scenario!r} is not a performance scenario (use one of {', '.join(PERF_SCENARIOS)})")
    config = ctxs[0].config
    settings = getattr(config.scenarios, scenario)
    shapes = scenario_shapes(config, scenario)
    by_engine = {c.endpoint.engine: c for c in ctxs}
    engines = list(by_engine)
    total = sum(_requests_per_round(ctxs[0], scenario, s) for s in shapes) * settings.rounds * len(ctxs)
    progress = Progress(total, f"{', '.join(engines)} {scenario}")
    # Seed of the Poisson arrivals: the config's, so a rate round is the same schedule every run.
    seed = getattr(settings, "seed", None)
    # The warmup may have taken each shape's first encounter: its round is the first-encounter tail.
    warmup_rounds = {e: [r for r in c.run_dir.read_rows("rounds", e) if r.get("warmup")] for e, c in by_engine.items()}
    design = {"order": "interleaved" if len(engines) > 1 else "sequential", "engines": engines}

    async def main() -> dict[str, list[dict[str, Any]]]:
        levels: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
        async with contextlib.AsyncExitStack() as stack:
            sessions, req_rows, round_rows = {}, {}, {}
            for e, c in by_engine.items():
                sessions[e] = await stack.enter_async_context(new_session(c.endpoint.adapter.keeps_alive_after_stream,
                                                                         c.endpoint.access))
                req_rows[e] = stack.enter_context(c.run_dir.rows("requests", e, partition=scenario))
                round_rows[e] = stack.enter_context(c.run_dir.rows("rounds", e, partition=scenario))
            for shape in shapes:
                rounds: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
                usage_missing = dict.fromkeys(engines, 0)
                for n in range(1, settings.rounds + 1):
                    for e in round_order(engines, n):
                        c = by_engine[e]
                        plan = RoundPlan(
                            scenario=scenario,
                            shape=shape,
                            round=n,
                            requests=_requests_per_round(c, scenario, shape),
                            first_encounter=is_first_encounter(c.run_dir, e, shape),
                            arrival_seed=None if seed is None else f"{seed}/{shape.key}/r{n}",
                            **shard_plan(c.config.load, shape, c.endpoint.base_url),
                        )
                        outcome = await run_round(c, sessions[e], plan, req_rows[e], progress)
                        round_rows[e].write(outcome.row)
                        mark_seen(c.run_dir, e, shape)
                        rounds[e].append(outcome.row)
                        usage_missing[e] += _usage_missing(outcome.results)
                for e in engines:
                    levels[e].append(level_summary(shape, rounds[e], usage_missing[e], warmup_rounds[e]))
        return levels

    try:
        levels = run_async(main())
    finally:
        progress.close()
    return {e: {"engine": e, "scenario": scenario, "design": design, "levels": levels[e]} for e in engines}


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
