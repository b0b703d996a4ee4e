"""The trace scenario: the configured window of a request trace replayed open loop, `rounds` times per engine.

Each round streams the window (tasks/traffic/): a row's prompt is its blocks' token IDs (salted by the run and
round, so each round is new to the engine's cache and every engine gets the same prompts), its output length
forced, its arrival at the trace's time over `speed`. This process builds each row's request and hands it to
the client processes (tasks/load/shards.py run_streamed; across runner pods, pod_shards.measure_streamed), whose
loops only wait for its time and send it. Rows go to `trace_requests` (the requests columns, plus the row's line,
due time, lateness and expected reuse), each round's figures to `rounds` (rate_rps: the window's offered rate),
each client process to `client_shards`. The round's server hit rate is read from the engine's counters around it.
A round whose lateness p99 exceeds lateness_p99_max_s is the client's, not the trace's: flagged, and left out of
every comparison (`left_out`, read by the report and the nightly)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from collections.abc import Callable, Iterator
from typing import Any

from tasks.engines.context import EngineContext
from tasks.telemetry import metrics as server_metrics
from tasks.telemetry.engine_metrics import RoundWatch
from tasks.telemetry.window import Window, hit_rate_over
from tasks.config.traffic import BEHIND_FIX
from tasks.load.client import RequestSpec, run_async
from tasks.load.plan import COMPLETIONS_PATH, Shape, run_tag
from tasks.load.progress import Progress
from tasks.load import pod_shards
from tasks.load.shards import ShardChoice, choose_shards, client_rows, run_streamed
from tasks.load.streamed import Due
from tasks.core.names import TRACE_SCENARIO
from tasks.traffic.trace_figures import ReplayFigures
from tasks.traffic.trace_formats import TraceRow
from tasks.traffic.trace_prompts import PromptEncoder, ReuseMeter, completion_payload
from tasks.traffic.trace_source import check_trace, window_rows

log = logging.getLogger("dayone.load")


def round_salt(seed: int, run_id: str, round_: int) -> str:
    """What a round's block tokens are drawn with: the same for every engine, new each round."""
    return f"{seed}/{run_id}/r{round_}"


def run_trace(ectx: EngineContext, s3: Callable[[], Any] | None) -> dict[str, Any]:
    """Every round of the window against one engine; its summary (per round: lateness, reuse, hit rate)."""
    cfg = ectx.config
    t = cfg.scenarios.trace
    plan = check_trace(cfg, s3)  # the plan read it; read again here, where the runner's file or object is
    rate = plan["offered_rps"] or float(plan["rows"])
    shape = Shape(plan["longest_input_tokens"], plan["longest_output_tokens"], rate_rps=rate)
    # As an open-loop performance round's: its streams are its request count (what it may have in flight).
    shards = TraceClients(choose_shards(cfg.load, shape, ectx.endpoint.base_url, plan["rows"]), plan["rows"])
    log.info("%s %s: %d client process%s: %s", ectx.endpoint.engine, TRACE_SCENARIO, shards.processes,
             "es" if shards.processes > 1 else "", shards.reason)
    progress = Progress(plan["rows"] * t.rounds, f"{ectx.endpoint.engine} {TRACE_SCENARIO}")
    rounds = []
    try:
        for n in range(1, t.rounds + 1):
            rounds.append(run_async(_round(ectx, s3, n, rate, shards, progress)))
    finally:
        progress.close()
    late = [r for r in rounds if r["behind"]]
    return {"engine": ectx.endpoint.engine, "scenario": TRACE_SCENARIO, "trace": plan, "rounds": rounds,
            "behind": bool(late), "lateness_p99_max_s": t.lateness_p99_max_s,
            "client_processes": shards.processes, "client_processes_reason": shards.reason,
            "left_out": [left_out_reason(r["round"], r["lateness_p99_s"], t.lateness_p99_max_s) for r in late]}


def _write_engine_round(ectx: EngineContext, keys: dict[str, Any], watch: RoundWatch, client_row: dict[str, Any],
                        partition: str) -> None:
    """The round's engine_rounds row and the raw scrapes it came from (server_metrics), as a performance round's."""
    engine = ectx.endpoint.engine
    with ectx.run_dir.rows("engine_rounds", engine, partition) as out:
        out.write(watch.row(keys, client_row))
    with ectx.run_dir.rows("server_metrics", engine, partition) as out:
        for phase, scrape in (("before_round", watch.before), ("after_round", watch.after)):
            if scrape is not None:
                for r in server_metrics.sample_rows(keys, phase, scrape.samples, scrape.ts):
                    out.write(r)


def left_out_reason(round_: int, lateness_p99_s: float, limit_s: float) -> str:
    """Why a round the client fell behind in decides nothing, and what to change."""
    return (f"round {round_}: lateness p99 {1e3 * lateness_p99_s:.1f} ms > {1e3 * limit_s:.1f} ms "
            f"(scenarios.trace.lateness_p99_max_s): the client fell behind the trace, so the round is left out of "
            f"the comparisons, the choice and the nightly. {BEHIND_FIX}")


@dataclass(frozen=True)
class TraceClients:
    choice: ShardChoice  # client processes (load.client_processes), and why
    streams: int  # the window's rows: what a round may have in flight

    @property
    def processes(self) -> int:
        return self.choice.processes

    @property
    def reason(self) -> str:
        return self.choice.reason


async def _round(ectx: EngineContext, s3: Callable[[], Any] | None, n: int, rate_rps: float, shards: TraceClients,
                 progress: Progress) -> dict[str, Any]:
    cfg, ep = ectx.config, ectx.endpoint
    t = cfg.scenarios.trace
    tag = f"{TRACE_SCENARIO}-r{n}-{run_tag(ep.run_id)}"
    keys = ep.row_keys(TRACE_SCENARIO, n)
    level = {"concurrency": None, "rate_rps": rate_rps, "max_in_flight": None, "launch": 0}
    encoder = PromptEncoder(round_salt(t.seed, ep.run_id, n), t.block_tokens)
    reuse = ReuseMeter(t.block_tokens)
    figures = ReplayFigures(cfg.slo, cfg.round_error_rate_max, seed=tag)
    pending: dict[str, tuple[int, int]] = {}  # request id -> (line, expected cached tokens), while in flight

    def schedule(rows: Iterator[TraceRow]) -> Iterator[Due]:
        """Each row's request, built on the feeding thread of run_streamed, never on a loop that times sends."""
        for row in rows:
            rid = f"{tag}-{row.line:08d}"
            pending[rid] = (row.line, reuse.observe(row))
            payload = completion_payload(ep.model, encoder.prompt_json(row), row.output_tokens, ep.adapter)
            yield Due(row.arrival_s / t.speed, RequestSpec(rid, COMPLETIONS_PATH, payload, row.input_tokens,
                                                           row.output_tokens))

    watch = await asyncio.to_thread(RoundWatch(ep.base_url, ep.adapter, access=ep.access).start)
    with ectx.run_dir.rows("trace_requests", ep.engine, partition=f"{TRACE_SCENARIO}-r{n}") as out, \
            out.off_loop() as queued:

        def on_result(r: Any, due_ts: float) -> None:
            line, expected = pending.pop(r.request_id)
            lateness = r.send_ts - due_ts
            row = {**keys, **level, "first_encounter": n == 1, **r.row_fields(), "trace_line": line,
                   "due_ts": due_ts, "lateness_s": lateness, "expected_cached_tokens": expected}
            queued.write(row)
            figures.add(row, lateness)
            progress.advance(r.status == "ok", tag)

        pods = pod_shards.active()
        pods_used = 1 if pods is None else pods.pods_for(shards.streams)
        reason = shards.reason
        try:
            with window_rows(cfg, s3) as rows:
                if pods is not None and pods_used > 1:  # runner pods measuring the step together
                    per_pod = -(-shards.streams // pods_used)
                    processes = max(1, min(pods.cores, -(-per_pod // cfg.load.streams_per_process)))
                    reason = pods.reason(pods_used, shards.streams)
                    run = await pods.measure_streamed(
                        pods_used, ep.base_url, schedule(rows), ep.adapter, ep.request_timeout_s, processes,
                        on_result=on_result, keep_alive=ep.adapter.keeps_alive_after_stream, access=ep.access,
                        engine=ep.engine)
                else:
                    run = await run_streamed(ep.base_url, schedule(rows), ep.adapter, ep.request_timeout_s,
                                             shards.processes, on_result=on_result,
                                             keep_alive=ep.adapter.keeps_alive_after_stream, access=ep.access)
        finally:
            watch.stop_sampling()
    await asyncio.to_thread(watch.finish)
    hit = hit_rate_over(ep.adapter, Window(tuple(s.series for s in (watch.before, watch.after) if s is not None),
                                           f"during trace round {n}"))
    row = {**keys, **level, "input_tokens": None, "output_tokens": None, "first_encounter": n == 1,
           "warmup": False, **figures.figures()}
    with ectx.run_dir.rows("rounds", ep.engine, partition=f"{TRACE_SCENARIO}-r{n}") as rounds_out:
        rounds_out.write(row)
    if watch.active:  # the engine's own histograms over the round, beside the client's figures (engine_rounds)
        await asyncio.to_thread(_write_engine_round, ectx, keys, watch, row, f"{TRACE_SCENARIO}-r{n}")
    round_keys = {**keys, "concurrency": None, "rate_rps": rate_rps, "input_tokens": None, "output_tokens": None,
                  "warmup": False}
    with ectx.run_dir.rows("client_shards", ep.engine, partition=f"{TRACE_SCENARIO}-r{n}") as shards_out:
        for shard_row in client_rows(round_keys, run.reports, reason):
            shards_out.write(shard_row)
    late = figures.lateness_figures()
    behind = late["lateness_p99_s"] is not None and late["lateness_p99_s"] > t.lateness_p99_max_s
    if behind:
        log.warning("%s: %s", tag, left_out_reason(n, late["lateness_p99_s"], t.lateness_p99_max_s))
    return {"round": n, "requests": run.sent, "status": row["status"], **late, "behind": behind,
            "peak_in_flight": run.peak_in_flight, "client_processes": len(run.reports),
            "client_priority": ", ".join(run.priorities) or None,
            "expected_reuse": reuse.share, "server_hit_rate": hit.rate, "server_queries_delta": hit.queries_delta,
            "server_hits_delta": hit.hits_delta, "hit_rate_unpublished": hit.unpublished
            or (None if ep.adapter.cache_counters else f"{ep.adapter.dialect} has no known prefix-cache counters"),
            "length_deviations": row["length_deviations"], "output_tps": row["output_tps"],
            "ttft_p50_s": row["ttft_p50_s"], "ttft_p99_s": row["ttft_p99_s"], "e2e_p50_s": row["e2e_p50_s"]}
