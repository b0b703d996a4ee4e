"""Shared-prefix load (PROTOCOL.md, "Shared prefix"): groups of requests sharing a system prompt, each with
its own suffix, sent in rounds through the load client like the performance scenarios; each round's
expected reuse beside what the engine measured, from its usage and from its prefix-cache counters."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tasks.config.shared_prefix import SharedPrefixScenario
from tasks.engines.context import EngineContext
from tasks.telemetry import metrics
from tasks.telemetry.window import Window, hit_rate_over
from tasks.load.client import RequestResult, RequestSpec, new_session, run_async
from tasks.load.plan import COMPLETIONS_PATH, Shape, completion_body, random_token_ids
from tasks.load.progress import Progress
from tasks.load.rounds import RoundPlan, run_round
from tasks.load.shards import shard_plan
from tasks.stats.figures import level_figures, median
from tasks.stats.intervals import share_t_interval
from tasks.scenarios.traffic_shapes import shared_prefix_shapes
from tasks.scenarios.warmup import is_first_encounter, mark_seen

SCENARIO = "shared_prefix"
CONFIDENCE = 0.95


def shared_prefix_prompts(s: SharedPrefixScenario, seed: str) -> list[list[int]]:
    """A round's prompts, groups taking turns (g0, g1, ..., g0, g1, ...): group g's prefix is drawn from the
    seed and g, each suffix from the seed, g and its place. A round's own seed makes its prefixes new."""
    prefixes = [random_token_ids(s.prefix_tokens, f"{seed}/prefix/{g}") for g in range(s.groups)]
    return [prefixes[g] + random_token_ids(s.suffix_tokens, f"{seed}/suffix/{g}/{i}")
            for i in range(s.requests_per_group) for g in range(s.groups)]


def planner(ctx: EngineContext, s: SharedPrefixScenario) -> Any:
    """The RoundPlan's `prompts`: token-ID completion requests of the round's groups."""
    ep = ctx.endpoint

    def plan(id_prefix: str, seed: str) -> list[RequestSpec]:
        return [RequestSpec(request_id=f"{id_prefix}-{i:05d}", path=COMPLETIONS_PATH,
                            payload=json.dumps(completion_body(ep.model, ids, s.output_tokens, ep.adapter),
                                               separators=(",", ":")).encode(),
                            expected_prompt_tokens=s.input_tokens, expected_completion_tokens=s.output_tokens)
                for i, ids in enumerate(shared_prefix_prompts(s, seed))]

    return plan


def usage_reuse(results: Sequence[RequestResult]) -> dict[str, Any]:
    """The cached share of the prompt tokens the engine reported per request (its usage)."""
    told = [r for r in results if r.status == "ok" and r.cached_prompt_tokens is not None and r.prompt_tokens]
    prompt = sum(r.prompt_tokens or 0 for r in told)
    cached = sum(r.cached_prompt_tokens or 0 for r in told)
    return {"usage_prompt_tokens": prompt if told else None, "usage_cached_tokens": cached if told else None,
            "usage_hit_rate": cached / prompt if prompt else None, "cached_reported": len(told)}


def _counters(ctx: EngineContext) -> dict[str, float] | None:
    """Every series of the engine's /metrics, for the prefix-cache hit rate over a round (None: unreadable)."""
    ep = ctx.endpoint
    if ep.adapter.metrics_path is None:
        return None
    try:
        with ep.http_client(10.0) as client:
            return metrics.series_values(metrics.scrape_samples(client, ep.base_url, ep.adapter))
    except metrics.MetricsUnavailable:
        return None


def round_row(ctx: EngineContext, s: SharedPrefixScenario, shape: Shape, n: int, outcome_row: dict[str, Any],
              results: Sequence[RequestResult], before: dict[str, float] | None,
              after: dict[str, float] | None) -> dict[str, Any]:
    """One `shared_prefix_rounds` row: the round's expected reuse, the engine's usage and counters."""
    server = hit_rate_over(ctx.endpoint.adapter, Window((before, after), f"during round {n}"))
    unpublished = server.unpublished
    if unpublished is None and server.rate is None:
        unpublished = (f"{ctx.endpoint.adapter.dialect} has no known prefix-cache counters"
                       if ctx.endpoint.adapter.cache_counters is None else "the counters were not readable")
    return {**ctx.endpoint.row_keys(SCENARIO, n), "concurrency": shape.concurrency, "groups": s.groups,
            "prefix_tokens": s.prefix_tokens, "suffix_tokens": s.suffix_tokens,
            "requests_per_group": s.requests_per_group, "requests_ok": outcome_row.get("requests_ok"),
            "requests_failed": outcome_row.get("requests_failed"), "expected_reuse": s.expected_reuse(),
            **usage_reuse(results), "server_queries_delta": server.queries_delta,
            "server_hits_delta": server.hits_delta, "server_hit_rate": server.rate, "deltas_unpublished": unpublished,
            "ttft_p50_s": outcome_row.get("ttft_p50_s"), "e2e_p50_s": outcome_row.get("e2e_p50_s"),
            "first_encounter": outcome_row.get("first_encounter"), "status": outcome_row.get("status")}


def run_shared_prefix(ctx: EngineContext) -> dict[str, Any]:
    """Every concurrency level's rounds; `rounds`, `requests` and `shared_prefix_rounds` rows; the summary."""
    s = ctx.config.scenarios.shared_prefix
    ep = ctx.endpoint
    engine = ep.engine
    shapes = shared_prefix_shapes(ctx.config)
    progress = Progress(len(shapes) * s.rounds * s.requests_per_round, f"{engine} {SCENARIO}")
    rows: dict[str, list[dict[str, Any]]] = {sh.key: [] for sh in shapes}
    round_rows: dict[str, list[dict[str, Any]]] = {sh.key: [] for sh in shapes}

    async def main() -> None:
        async with new_session(ep.adapter.keeps_alive_after_stream, ep.access) as session:
            with (ctx.run_dir.rows("requests", engine, SCENARIO) as req_out,
                  ctx.run_dir.rows("rounds", engine, SCENARIO) as rounds_out,
                  ctx.run_dir.rows("shared_prefix_rounds", engine, SCENARIO) as reuse_out):
                for shape in shapes:
                    for n in range(1, s.rounds + 1):
                        plan = RoundPlan(scenario=SCENARIO, shape=shape, round=n, requests=s.requests_per_round,
                                         first_encounter=is_first_encounter(ctx.run_dir, engine, shape),
                                         prompts=planner(ctx, s),
                                         **shard_plan(ctx.config.load, shape, ep.base_url, s.requests_per_round))
                        before = _counters(ctx)  # off the timed window, like the round's own scrapes
                        outcome = await run_round(ctx, session, plan, req_out, progress)
                        after = _counters(ctx)
                        rounds_out.write(outcome.row)
                        mark_seen(ctx.run_dir, engine, shape)
                        row = round_row(ctx, s, shape, n, outcome.row, outcome.results, before, after)
                        reuse_out.write(row)
                        rows[shape.key].append(row)
                        round_rows[shape.key].append(outcome.row)

    try:
        run_async(main())
    finally:
        progress.close()
    return {"engine": engine, "scenario": SCENARIO, "expected_reuse": s.expected_reuse(),
            "levels": [level_reuse(sh, rows[sh.key], round_rows[sh.key]) for sh in shapes]}


def level_reuse(shape: Shape, rows: Sequence[dict[str, Any]], round_rows: Sequence[dict[str, Any]],
                warmup_rounds: Sequence[dict[str, Any]] = (), confidence: float = CONFIDENCE) -> dict[str, Any]:
    """A level's reuse: expected, and measured from usage and from the counters (median over the rounds
    that did not fail, with a t interval of the rounds' values), beside its load figures and first-encounter
    tail (the warmup round that first met its shape, as for the performance scenarios)."""
    kept = [r for r in rows if r.get("status") != "failed"]

    def measured(name: str) -> dict[str, Any]:
        values = [r[name] for r in kept if r.get(name) is not None]
        return {"median": median(values), "interval": share_t_interval(values, confidence), "rounds": len(values)}

    return {"concurrency": shape.concurrency, "input_tokens": shape.input_tokens,
            "output_tokens": shape.output_tokens,
            "expected_reuse": rows[0]["expected_reuse"] if rows else None,
            "usage_hit_rate": measured("usage_hit_rate"), "server_hit_rate": measured("server_hit_rate"),
            **level_figures(round_rows, warmup_rounds)}
