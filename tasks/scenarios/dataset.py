"""Your own prompts (PROTOCOL.md, "Your own prompts"): the dataset's rows sent as written, a text prompt to
/v1/completions and a message list to /v1/chat/completions, closed loop (N users) or at a Poisson rate, in
rounds through the load client; lengths from the engine's usage, one `dataset_rounds` row a round."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from tasks.config.dataset import DatasetScenario
from tasks.engines.context import EngineContext
from tasks.load.client import RequestResult, RequestSpec, new_session, run_async
from tasks.load.plan import COMPLETIONS_PATH, Shape
from tasks.load.progress import Progress
from tasks.load.rounds import RoundPlan, run_round
from tasks.load.shards import shard_plan
from tasks.stats.figures import median
from tasks.scenarios.shared_prefix import usage_reuse
from tasks.traffic.dataset_rows import DatasetRow, check_dataset, dataset_rows

SCENARIO = "dataset"
CHAT_PATH = "/v1/chat/completions"


def shapes(d: DatasetScenario) -> list[Shape]:
    """The levels: users in flight (closed) or arrival rates (poisson); lengths are the rows' own (0: none)."""
    if d.arrival == "poisson":
        return [Shape(0, d.max_tokens, rate_rps=float(r)) for r in d.rates]
    return [Shape(0, d.max_tokens, concurrency=c) for c in d.concurrency]


def arrival_seed(d: DatasetScenario, shape: Shape, round_: int) -> str:
    """The seed of a rate round's Poisson arrivals: the same for every engine, new each level and round."""
    return f"{d.seed}/{shape.key}/r{round_}"


def request_body(model: str, row: DatasetRow, max_tokens: int, adapter: Any) -> tuple[str, dict[str, Any]]:
    """(path, body) of a row: its prompt or messages exactly as written, its output length forced."""
    common = {"model": model, "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.0,
              **adapter.exact_output_fields(row.max_tokens or max_tokens)}
    if row.messages is not None:
        return CHAT_PATH, {**common, "messages": list(row.messages)}
    return COMPLETIONS_PATH, {**common, "prompt": row.prompt}


def planner(ctx: EngineContext, s3: Callable[[], Any] | None) -> Callable[[str, str], list[RequestSpec]]:
    """The RoundPlan's `prompts`: the dataset read again for each round (streamed, one spec a row; the
    request id ends in the row's line)."""
    ep, d = ctx.endpoint, ctx.config.scenarios.dataset

    def plan(id_prefix: str, seed: str) -> list[RequestSpec]:
        specs = []
        with dataset_rows(ctx.config, s3) as rows:
            for row in rows:
                path, body = request_body(ep.model, row, d.max_tokens, ep.adapter)
                specs.append(RequestSpec(request_id=f"{id_prefix}-L{row.line:07d}", path=path,
                                         payload=json.dumps(body, separators=(",", ":")).encode(),
                                         expected_completion_tokens=row.max_tokens or d.max_tokens))
        return specs

    return plan


def line_of(request_id: str) -> int:
    """The dataset line a request id carries (planner's `-L<line>` tail)."""
    return int(request_id.rsplit("-L", 1)[1])


def clear_cache(ctx: EngineContext) -> bool | None:
    """Empty the engine's prefix cache before a round, so every round meets the rows as new (None: the
    engine has no clear endpoint; False: it did not clear)."""
    ep = ctx.endpoint
    if ep.adapter.cache_clear is None:
        return None
    with ep.http_client(30.0) as client:
        done, _ = ep.adapter.clear_cache_when_idle(client, ep.base_url)
    return done


def round_row(ctx: EngineContext, shape: Shape, n: int, outcome_row: dict[str, Any],
              results: Sequence[RequestResult], chat_rows: int, cache_cleared: bool | None) -> dict[str, Any]:
    """One `dataset_rounds` row: the round's rows, lengths from usage and the cached share usage reported."""
    ok = [r for r in results if r.status == "ok"]
    return {**ctx.endpoint.row_keys(SCENARIO, n), "concurrency": shape.concurrency, "rate_rps": shape.rate_rps,
            "source": ctx.config.scenarios.dataset.source_name(), "rows_sent": len(results),
            "chat_rows": chat_rows,
            "requests_ok": outcome_row.get("requests_ok"), "requests_failed": outcome_row.get("requests_failed"),
            "prompt_tokens_p50": median([r.prompt_tokens for r in ok if r.prompt_tokens is not None]),
            "completion_tokens_p50": median([r.completion_tokens for r in ok if r.completion_tokens is not None]),
            **usage_reuse(results), "cache_cleared": cache_cleared,
            "ttft_p50_s": outcome_row.get("ttft_p50_s"), "e2e_p50_s": outcome_row.get("e2e_p50_s"),
            "output_tps": outcome_row.get("output_tps"), "first_encounter": outcome_row.get("first_encounter"),
            "status": outcome_row.get("status")}


def run_dataset(ctx: EngineContext, s3: Callable[[], Any] | None) -> dict[str, Any]:
    """Every level's rounds; `rounds`, `requests` and `dataset_rounds` rows; the summary per level."""
    d = ctx.config.scenarios.dataset
    ep = ctx.endpoint
    engine = ep.engine
    levels = shapes(d)
    prompts = planner(ctx, s3)
    found = check_dataset(ctx.config, s3)  # the plan read it; read again here, where the runner's file or object is
    count = found["rows"]
    progress = Progress(len(levels) * d.rounds * count, f"{engine} {SCENARIO}")
    kept: dict[str, list[dict[str, Any]]] = {sh.key: [] for sh in levels}

    async def main() -> None:
        async with new_session(ep.adapter.keeps_alive_after_stream, ep.access) as session:
            with (ctx.run_dir.rows("requests", engine, SCENARIO) as req_out,
                  ctx.run_dir.rows("rounds", engine, SCENARIO) as rounds_out,
                  ctx.run_dir.rows("dataset_rounds", engine, SCENARIO) as dataset_out):
                for shape in levels:
                    for n in range(1, d.rounds + 1):
                        cleared = clear_cache(ctx)
                        plan = RoundPlan(scenario=SCENARIO, shape=shape, round=n, requests=count,
                                         first_encounter=n == 1, arrival_seed=arrival_seed(d, shape, n),
                                         prompts=prompts, lengths_from_usage=True,
                                         **shard_plan(ctx.config.load, shape, ep.base_url, count))
                        outcome = await run_round(ctx, session, plan, req_out, progress)
                        # a round the engine could not start from an empty cache is marked: compared like with like
                        rounds_out.write({**outcome.row, "cache_cleared": cleared is True})
                        row = round_row(ctx, shape, n, outcome.row, outcome.results, found["chat_rows"], cleared)
                        dataset_out.write(row)
                        kept[shape.key].append(row)

    try:
        run_async(main())
    finally:
        progress.close()
    return {"engine": engine, "scenario": SCENARIO, "source": d.source_name(), "rows": count,
            "levels": [{"concurrency": sh.concurrency, "rate_rps": sh.rate_rps, "rounds": kept[sh.key]}
                       for sh in levels]}
