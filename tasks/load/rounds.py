"""One measured round: plan the requests, send them (closed or open loop), write the rows.

Shared by the performance scenarios and the warmup, so a warmup round is timed and kept exactly
like a measured one. Request rows stream to the run directory as requests complete: the timing
loop only queues each row; a writer process encodes and appends them every 50 ms
(RowWriter.off_loop).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from tasks.context import StepContext
from tasks.desensitize import desensitize
from tasks.load import client as load_client
from tasks.load.plan import Shape, plan_requests, poisson_arrivals, run_tag
from tasks.load.progress import Progress
from tasks.load.shards import ShardReport, run_sharded
from tasks.load.stats import round_figures
from tasks.staging import RowWriter

log = logging.getLogger("dayone.load")


@dataclass(frozen=True)
class RoundPlan:
    scenario: str  # the scenario column (warmup rounds: "warmup")
    shape: Shape
    round: int
    requests: int
    first_encounter: bool
    warmup: bool = False
    arrival_seed: str | int | None = None  # open loop only
    shards: int = 1  # client processes sharing the round (tasks/load/shards.py)


@dataclass
class RoundOutcome:
    row: dict[str, Any]  # the rounds-table row
    results: list[load_client.RequestResult]
    shards: list[ShardReport] = field(default_factory=list)  # a sharded round's clocks and CPU


async def run_round(
    ctx: StepContext,
    session: Any,
    plan: RoundPlan,
    request_rows: RowWriter,
    progress: Progress | None = None,
) -> RoundOutcome:
    ep = ctx.endpoint
    shape = plan.shape
    tag = f"{plan.scenario}-{shape.key}-r{plan.round}"
    specs = plan_requests(
        model=ep.model,
        adapter=ep.adapter,
        shape=shape,
        count=plan.requests,
        id_prefix=f"{tag}-{run_tag(ep.run_id)}",
        seed=f"{ep.run_id}/{ep.engine}/{tag}",
    )
    keys = ep.row_keys(plan.scenario, plan.round)
    level = {"concurrency": shape.concurrency, "rate_rps": shape.rate_rps}
    rows: list[dict[str, Any]] = []

    with request_rows.off_loop() as queued:

        def on_result(r: load_client.RequestResult) -> None:
            row = {**keys, **level, "first_encounter": plan.first_encounter, **r.row_fields()}
            queued.write(row)
            rows.append(row)
            if progress is not None:
                progress.advance(r.status == "ok", tag)

        arrivals = None
        if shape.rate_rps is not None:
            seed = plan.arrival_seed if plan.arrival_seed is not None else tag
            arrivals = poisson_arrivals(len(specs), shape.rate_rps, seed)
        shards: list[ShardReport] = []
        if plan.shards > 1:
            results, shards = await run_sharded(
                ep.base_url, specs, ep.adapter, ep.request_timeout_s, plan.shards, on_result=on_result,
                concurrency=shape.concurrency if arrivals is None else None, arrivals_s=arrivals,
                keep_alive=ep.adapter.keeps_alive_after_stream,
            )
            log.info("%s: %d shards, clock offsets %s ms", tag, len(shards),
                     ", ".join(f"{1e3 * c.offset_s:+.3f}±{1e3 * c.uncertainty_s:.3f}" for c in shards))
        elif arrivals is None:
            results = await load_client.run_closed_loop(
                session, ep.base_url, specs, shape.concurrency, ep.adapter, ep.request_timeout_s, on_result
            )
        else:
            results = await load_client.run_open_loop(
                session, ep.base_url, specs, arrivals, ep.adapter, ep.request_timeout_s, on_result
            )
    figures = round_figures(rows, ctx.config.slo, ctx.config.round_error_rate_max)
    row = {**keys, **level, "input_tokens": shape.input_tokens, "output_tokens": shape.output_tokens,
           "first_encounter": plan.first_encounter, "warmup": plan.warmup, **figures}
    if figures["status"] == "failed":
        errors = sorted({r.error or "" for r in results if r.status != "ok"})
        log.warning("%s: round failed, %d of %d requests failed: %s", tag, figures["requests_failed"], len(rows),
                    desensitize(errors[:3]))  # engine errors may name internal hosts or carry tokens
    return RoundOutcome(row, results, shards)
