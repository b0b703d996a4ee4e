"""One measured round: plan the requests, send them (closed or open loop), write the rows.

Shared by the performance scenarios, the capacity search and the warmup, so a warmup round is timed
and kept exactly like a measured one. Around the sends it reads what the round cost: the engine's
/metrics (tasks/telemetry/engine_metrics.py: `engine_rounds`, `server_metrics`), the GPUs with
telemetry on (tasks/telemetry/gpu.py: `telemetry_rounds`) and the client's own processes
(`client_shards`). Request rows are only queued on the timing loop and written by a writer process
(RowWriter.off_loop): PROTOCOL.md section 8, "The timing loop stamps and queues, nothing else".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tasks.state import documents as run_documents
from tasks.engines.context import EngineContext
from tasks.core.desensitize import desensitize
from tasks.telemetry import metrics as server_metrics
from tasks.telemetry.engine_metrics import RoundWatch
from tasks.telemetry import gpu as telemetry
from tasks.telemetry.gpu import TelemetryWatch
from tasks.load import client as load_client
from tasks.load.plan import Shape, plan_requests, poisson_arrivals, run_tag
from tasks.load import pod_shards
from tasks.load.progress import Progress
from tasks.load.shards import ShardReport, UsageMeter, client_rows, one_process, run_sharded
from tasks.stats.figures import WAIT_FLAG_SHARE, round_figures
from tasks.state.partitions import RowWriter

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
    shards_reason: str | None = None  # why that many (shards.choose_shards)
    launch: int = 0  # the engine's start within the scenario (measurement.launches): 0 is the readied deployment
    # (id_prefix, seed) -> the round's requests, where a scenario plans its own prompts (shared_prefix);
    # None: random token IDs of the shape (plan_requests)
    prompts: Callable[[str, str], list[load_client.RequestSpec]] | None = None
    lengths_from_usage: bool = False  # the rows' own lengths (dataset): the round records none, usage tells them


@dataclass
class RoundOutcome:
    row: dict[str, Any]  # the rounds-table row
    results: list[load_client.RequestResult]
    shards: list[ShardReport] = field(default_factory=list)  # each client process's clock and CPU (one: shard 0)


async def run_round(
    ctx: EngineContext,
    session: Any,
    plan: RoundPlan,
    request_rows: RowWriter,
    progress: Progress | None = None,
    engine_rows: RowWriter | None = None,
    metrics_rows: RowWriter | None = None,
) -> RoundOutcome:
    """One round. `engine_rows`/`metrics_rows` take its engine_rounds and server_metrics rows; None: the
    round writes its own partition of each (named after the round, so a retried step replaces it)."""
    ep = ctx.endpoint
    shape = plan.shape
    tag = f"{plan.scenario}-{shape.key}-r{plan.round}"
    id_prefix, seed = f"{tag}-{run_tag(ep.run_id)}", f"{ep.run_id}/{ep.engine}/{tag}"
    if plan.prompts is not None:
        specs = plan.prompts(id_prefix, seed)
    else:
        specs = plan_requests(model=ep.model, adapter=ep.adapter, shape=shape, count=plan.requests,
                              id_prefix=id_prefix, seed=seed)
    keys = ep.row_keys(plan.scenario, plan.round)
    if plan.shards_reason:
        log.info("%s: %d client process%s: %s", tag, plan.shards, "es" if plan.shards > 1 else "", plan.shards_reason)
    level = {**shape.load_fields(), "launch": plan.launch}
    rows: list[dict[str, Any]] = []

    with request_rows.off_loop() as queued:

        def on_result(r: load_client.RequestResult) -> None:
            row = {**keys, **level, "first_encounter": plan.first_encounter, **r.row_fields()}
            queued.write(row)
            rows.append(row)
            if progress is not None:
                progress.answered(r, tag)

        arrivals = None
        if shape.rate_rps is not None:
            seed = plan.arrival_seed if plan.arrival_seed is not None else tag
            arrivals = poisson_arrivals(len(specs), shape.rate_rps, seed)
        shards: list[ShardReport] = []
        # Off the timed window: the scrape is done before the first send is written.
        watch = await asyncio.to_thread(RoundWatch(ep.base_url, ep.adapter, access=ep.access).start)
        gpu_watch = await asyncio.to_thread(_start_telemetry, ctx)
        pods = pod_shards.active()
        pods_used = 1 if pods is None else pods.pods_for(shape.streams(len(specs)))
        try:
            if pods_used > 1:
                assert pods is not None
                results, shards = await pods.measure(
                    pods_used, ep.base_url, specs, ep.adapter, ep.request_timeout_s, on_result=on_result,
                    concurrency=shape.concurrency if arrivals is None else None, arrivals_s=arrivals,
                    keep_alive=ep.adapter.keeps_alive_after_stream, access=ep.access, engine=ep.engine,
                )
                plan = replace(plan, shards=len(shards), shards_reason=pods.reason(pods_used, shape.streams(len(specs))))
                log.info("%s: %s; clock offsets %s ms", tag, plan.shards_reason,
                         ", ".join(f"pod {c.pod}: {1e3 * c.offset_s:+.3f}±{1e3 * c.uncertainty_s:.3f}" for c in shards))
            elif plan.shards > 1:
                results, shards = await run_sharded(
                    ep.base_url, specs, ep.adapter, ep.request_timeout_s, plan.shards, on_result=on_result,
                    concurrency=shape.concurrency if arrivals is None else None, arrivals_s=arrivals,
                    keep_alive=ep.adapter.keeps_alive_after_stream, access=ep.access,
                )
                log.info("%s: %d shards, clock offsets %s ms", tag, len(shards),
                         ", ".join(f"{1e3 * c.offset_s:+.3f}±{1e3 * c.uncertainty_s:.3f}" for c in shards))
            else:
                meter = UsageMeter()
                if arrivals is None:
                    results = await load_client.run_closed_loop(
                        session, ep.base_url, specs, shape.concurrency, ep.adapter, ep.request_timeout_s, on_result
                    )
                else:
                    results = await load_client.run_open_loop(
                        session, ep.base_url, specs, arrivals, ep.adapter, ep.request_timeout_s, on_result
                    )
                shards = [one_process(meter.stop(), len(specs))]
            if pods is not None and pods_used == 1:  # a round of a sharded step that one pod carries
                shards = [replace(r, pod_cores=pods.cores) for r in shards]
        finally:
            watch.stop_sampling()  # also when a send raised
            if gpu_watch is not None:
                gpu_watch.stop_sampling()
        await asyncio.to_thread(watch.finish)  # after the last completion
        if gpu_watch is not None:
            await asyncio.to_thread(gpu_watch.finish)
    await asyncio.to_thread(_write_client_shards, ctx, plan, tag, keys, shards)
    figures = round_figures(rows, ctx.config.slo, ctx.config.round_error_rate_max)
    lengths = (None, None) if plan.lengths_from_usage else (shape.input_tokens, shape.output_tokens)
    row = {**keys, **level, "input_tokens": lengths[0], "output_tokens": lengths[1],
           "first_encounter": plan.first_encounter, "warmup": plan.warmup, "cache_cleared": None, **figures}
    # File I/O off the loop's thread, as for every row (another engine's round may follow at once).
    await asyncio.to_thread(_write_engine_round, ctx, plan, tag, keys, watch, row, engine_rows, metrics_rows)
    if gpu_watch is not None:
        await asyncio.to_thread(_write_telemetry_round, ctx, plan, tag, keys, gpu_watch, row, rows)
    if figures["status"] == "failed":
        errors = sorted({r.error or "" for r in results if r.status != "ok"})
        log.warning("%s: round failed, %d of %d requests failed: %s", tag, figures["requests_failed"], len(rows),
                    desensitize(errors[:3]))  # engine errors may name internal hosts or carry tokens
    return RoundOutcome(row, results, shards)


def _write_engine_round(ctx: EngineContext, plan: RoundPlan, tag: str, keys: dict[str, Any], watch: RoundWatch,
                        client_row: dict[str, Any], engine_rows: RowWriter | None,
                        metrics_rows: RowWriter | None) -> None:
    if not watch.active:
        return  # an engine without /metrics: nothing the engine says about the round
    engine_row = watch.row(keys, client_row)
    if engine_row.get("preempted"):
        log.warning("%s: the engine %s %d requests in the round", tag,
                    "retracted" if ctx.endpoint.adapter.round_metrics.preemption_word == "retractions" else "preempted",
                    int(engine_row["preemptions"]))
    raw = [r for phase, s in (("before_round", watch.before), ("after_round", watch.after)) if s is not None
           for r in server_metrics.sample_rows(keys, phase, s.samples, s.ts)]
    partition = f"{plan.scenario}-{plan.shape.key}-r{plan.round}"
    engine = ctx.endpoint.engine
    if engine_rows is not None:
        engine_rows.write(engine_row)
    else:
        with ctx.run_dir.rows("engine_rounds", engine, partition) as out:
            out.write(engine_row)
    if metrics_rows is not None:
        for r in raw:
            metrics_rows.write(r)
    else:
        with ctx.run_dir.rows("server_metrics", engine, partition) as out:
            for r in raw:
                out.write(r)


def _start_telemetry(ctx: EngineContext) -> TelemetryWatch | None:
    """The engine's GPUs read around and during the round, when the run config asks (telemetry)."""
    engine = ctx.endpoint.engine
    hardware = ctx.run_dir.read_json(run_documents.hardware_doc(engine)) or {}
    source = telemetry.source_for(ctx.config, engine, ctx.endpoint.base_url, hardware.get("gpu_uuids"))
    return None if source is None else TelemetryWatch(source).start()


def _write_telemetry_round(ctx: EngineContext, plan: RoundPlan, tag: str, keys: dict[str, Any], watch: TelemetryWatch,
                           client_row: dict[str, Any], request_rows: list[dict[str, Any]]) -> None:
    """The round's telemetry_rounds partition (named after the round, so a retried step replaces it)."""
    row = watch.row(keys, client_row, request_rows)
    for reason in (row["unavailable"], row["energy_unpublished"]):
        if reason:
            log.warning("%s: GPU telemetry: %s", tag, reason)
    with ctx.run_dir.rows("telemetry_rounds", ctx.endpoint.engine, f"{plan.scenario}-{plan.shape.key}-r{plan.round}") as out:
        out.write(row)


def _write_client_shards(ctx: EngineContext, plan: RoundPlan, tag: str, keys: dict[str, Any],
                         shards: list[ShardReport]) -> None:
    """The round's client_shards partition (named after the round, so a retried step replaces it)."""
    shape = plan.shape
    round_keys = {**keys, "concurrency": shape.concurrency, "rate_rps": shape.rate_rps,
                  "input_tokens": None if plan.lengths_from_usage else shape.input_tokens,
                  "output_tokens": None if plan.lengths_from_usage else shape.output_tokens, "warmup": plan.warmup}
    with ctx.run_dir.rows("client_shards", ctx.endpoint.engine, f"{plan.scenario}-{shape.key}-r{plan.round}") as out:
        for row in client_rows(round_keys, shards, plan.shards_reason):
            out.write(row)
    busy = [r for r in shards if (r.waited_share or 0.0) > WAIT_FLAG_SHARE]
    if busy:
        log.warning("%s: the load client waited for a core %s of the round (other processes had it): its stamps "
                    "carry that wait", tag, ", ".join(f"{100 * (r.waited_share or 0):.0f}%"
                                                      + (f" (shard {r.shard})" if len(shards) > 1 else "")
                                                      for r in busy))
