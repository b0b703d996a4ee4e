"""The performance scenarios: short sweep, 4K prefill, 1K decode, Poisson rate (PROTOCOL.md 3-5).

`run_perf(ctx, scenario)` runs every level (concurrency, or arrival rate for "rate") for the
configured rounds, streams request rows and writes one round row per round, and returns the
summary with each level's figures (tasks/stats/figures.py level_figures) for `dayone bench`.
`run_perf_interleaved` does the same for engines that are up together, alternating their rounds
(ABBA) so their round values pair; it returns how it measured, and the report computes the figures
once, from the rounds table.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from tasks.engines.context import EngineContext
from tasks.config.variants import round_order
from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.progress import Progress
from tasks.load.rounds import RoundPlan, run_round
from tasks.load.shards import shard_plan
from tasks.stats.figures import level_figures
from tasks.scenarios.warmup import PERF_SCENARIOS, is_first_encounter, mark_seen, scenario_shapes

log = logging.getLogger("dayone.load")

Relaunch = Callable[[int], "list[EngineContext]"]  # launch index -> the engines' contexts, started afresh
# (the engines' contexts, the launch, its block of rounds) -> the block's result with each engine's restart reading
Watch = Callable[["list[EngineContext]", int, Callable[[], "dict[str, dict[str, Any]]"]], "dict[str, dict[str, Any]]"]


def _requests_per_round(ctx: EngineContext, scenario: str, shape: Shape) -> int:
    s = getattr(ctx.config.scenarios, scenario)
    if shape.concurrency is None:
        return s.requests_per_round
    return s.requests_for(shape.concurrency)


def run_perf(ctx: EngineContext, scenario: str) -> dict[str, Any]:
    """One engine's scenario: every level, its rounds one after another, with each level's summary."""
    measured, levels = _measure([ctx], scenario)
    return {**measured[ctx.endpoint.engine], "levels": levels(ctx.endpoint.engine)}


def run_perf_interleaved(ctxs: list[EngineContext], scenario: str, launches: int = 1, relaunch: Relaunch | None = None,
                         watch: Watch | None = None) -> dict[str, dict[str, Any]]:
    """The scenario on engines that are up together, round by round in turn: for each level, repetition n
    measures every engine once, forward on odd n and backward on even n (ABBA, tasks/config/variants.py), so
    slow drift and a noisy neighbour hit every engine alike and round n of each engine forms a pair.
    Returns how each engine was measured (design, restarts), not its figures: the report computes those
    from the rounds table; with one engine this is the plain sequential scenario.

    Rounds nest in launches (measurement.launches): launch 0 measures the engines as they are; before
    each launch j > 0, `relaunch(j)` starts every engine afresh and returns their contexts, and all the
    scenario's rounds run again, numbered on (launch j holds rounds j*rounds+1 .. (j+1)*rounds), in
    partitions of their own. `watch(ctxs, launch, block)` runs each launch's block between restart readings
    (a relaunch is no restart) and adds each engine's `engine_restarted` and `restarts`."""
    return _measure(ctxs, scenario, launches, relaunch, watch)[0]


def _measure(ctxs: list[EngineContext], scenario: str, launches: int = 1, relaunch: Relaunch | None = None,
             watch: Watch | None = None) -> tuple[dict[str, dict[str, Any]], Callable[[str], list[dict[str, Any]]]]:
    """run_perf_interleaved's measurement, and a function giving an engine's level summaries from its rows."""
    if scenario not in PERF_SCENARIOS:
        raise ValueError(f"scenario {scenario!r} is not a performance scenario (use one of {', '.join(PERF_SCENARIOS)})")
    if launches > 1 and relaunch is None:
        raise ValueError(f"{launches} launches need a way to start the engines anew (relaunch)")
    config = ctxs[0].config
    settings = getattr(config.scenarios, scenario)
    shapes = scenario_shapes(config, scenario)
    engines = [c.endpoint.engine for c in ctxs]
    total = sum(_requests_per_round(ctxs[0], scenario, s) for s in shapes) * settings.rounds * len(ctxs) * launches
    progress = Progress(total, f"{', '.join(engines)} {scenario}")
    # The warmup may have taken each shape's first encounter: its round is the first-encounter tail.
    warmup_rounds = {c.endpoint.engine: [r for r in c.run_dir.read_rows("rounds", c.endpoint.engine) if r.get("warmup")]
                     for c in ctxs}
    design = {"order": "interleaved" if len(engines) > 1 else "sequential", "engines": engines, "launches": launches}
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {e: {s.key: [] for s in shapes} for e in engines}
    usage_missing: dict[str, dict[str, int]] = {e: dict.fromkeys((s.key for s in shapes), 0) for e in engines}
    restarted: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
    try:
        for launch in range(launches):
            if launch:
                ctxs = relaunch(launch)

            def block(ctxs: list[EngineContext] = ctxs, launch: int = launch) -> dict[str, dict[str, Any]]:
                return run_async(_launch_block(ctxs, scenario, launch, rounds, usage_missing, progress))

            watched = (watch or (lambda _, __, run: run()))(ctxs, launch, block)
            for e in engines:
                restarted[e].append(watched[e])
    finally:
        progress.close()
    measured = {e: {"engine": e, "scenario": scenario, "design": design,
                    "engine_restarted": any(w.get("engine_restarted") for w in restarted[e]),
                    "restarts": _restarts(restarted[e])}
                for e in engines}
    return measured, lambda e: [level_summary(s, rounds[e][s.key], usage_missing[e][s.key], warmup_rounds[e])
                                for s in shapes]


def _restarts(readings: list[dict[str, Any]]) -> int | None:
    """Restarts over the launches: a sum, None where a launch's restart was seen only in /metrics."""
    counts = [w.get("restarts") for w in readings]
    return None if any(c is None for c in counts) else sum(counts)


async def _launch_block(ctxs: list[EngineContext], scenario: str, launch: int,
                        rounds: dict[str, dict[str, list[dict[str, Any]]]], usage_missing: dict[str, dict[str, int]],
                        progress: Progress) -> dict[str, dict[str, Any]]:
    """One launch's rounds of the scenario on the engines as they now run; each round row lands in `rounds`."""
    config = ctxs[0].config
    settings = getattr(config.scenarios, scenario)
    by_engine = {c.endpoint.engine: c for c in ctxs}
    engines = list(by_engine)
    # Seed of the Poisson arrivals: the config's, so a rate round is the same schedule every run (and launch).
    seed = getattr(settings, "seed", None)
    partition = scenario if launch == 0 else f"{scenario}.launch{launch}"
    async with contextlib.AsyncExitStack() as stack:
        sessions, req_rows, round_rows = {}, {}, {}
        for e, c in by_engine.items():
            sessions[e] = await stack.enter_async_context(new_session(c.endpoint.adapter.keeps_alive_after_stream,
                                                                         c.endpoint.access))
            req_rows[e] = stack.enter_context(c.run_dir.rows("requests", e, partition=partition))
            round_rows[e] = stack.enter_context(c.run_dir.rows("rounds", e, partition=partition))
        for shape in scenario_shapes(config, scenario):
            for n in range(1, settings.rounds + 1):
                for e in round_order(engines, n):
                    c = by_engine[e]
                    requests = _requests_per_round(c, scenario, shape)
                    plan = RoundPlan(
                        scenario=scenario,
                        shape=shape,
                        round=launch * settings.rounds + n,
                        requests=requests,
                        first_encounter=is_first_encounter(c.run_dir, e, shape),
                        arrival_seed=None if seed is None else f"{seed}/{shape.key}/r{n}",
                        **shard_plan(c.config.load, shape, c.endpoint.base_url, requests),
                        launch=launch,
                    )
                    outcome = await run_round(c, sessions[e], plan, req_rows[e], progress)
                    round_rows[e].write(outcome.row)
                    mark_seen(c.run_dir, e, shape)
                    rounds[e][shape.key].append(outcome.row)
                    usage_missing[e][shape.key] += _usage_missing(outcome.results)
    return {e: {} for e in engines}


def _usage_missing(results: list[Any]) -> int:
    return sum(1 for r in results if r.status == "ok" and not r.usage_present)


def level_summary(shape: Shape, rounds: list[dict[str, Any]], usage_missing: int = 0,
                  warmup_rounds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One level's summary: its shape, its rounds, and its figures (tasks/stats/figures.py level_figures)."""
    out: dict[str, Any] = {
        "concurrency": shape.concurrency,
        "rate_rps": shape.rate_rps,
        "input_tokens": shape.input_tokens,
        "output_tokens": shape.output_tokens,
        "rounds": [
            {k: r.get(k) for k in ("round", "status", "first_encounter", "requests_ok", "requests_failed", "error_rate")}
            for r in rounds
        ],
        **level_figures(rounds, warmup_rounds or ()),
    }
    if usage_missing:
        out["usage_note"] = (
            f"{usage_missing} completed requests streamed no usage: completion tokens, TPOT and "
            "output TPS are unknown for them (recorded as null, not guessed)"
        )
    return out
