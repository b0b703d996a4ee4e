"""Result table schemas: defined once, used by the writers, the expectation suites and the tests.

PROTOCOL.md section 6. Every row carries run_id, engine, image_digest, scenario and round.
Times are seconds as floats. List columns (itl_s, tokens_per_event) are JSON text in CSV.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:  # pandas loads only where a table becomes a frame: DAG files stay cheap to parse
    import pandas as pd


PERCENTILES = ("p50", "p90", "p95", "p99", "max", "mean")
LATENCIES = ("ttft", "tpot", "itl", "e2e")


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # str | int | float | bool | list | json
    nullable: bool = True
    values: tuple[str, ...] = ()  # allowed values, when a closed set
    min_value: float | None = None
    max_value: float | None = None
    description: str = ""


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...] = field(default=())  # unique together

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)


def _common() -> tuple[Column, ...]:
    return (
        Column("run_id", "str", nullable=False),
        Column("engine", "str", nullable=False),
        Column("image_digest", "str", description="Pinned platform digest, or the local engine's identity hash."),
        Column("scenario", "str", nullable=False),
        Column("round", "int", nullable=False, min_value=0),
    )


def _secs(name: str, nullable: bool = True, description: str = "") -> Column:
    return Column(name, "float", nullable=nullable, min_value=0.0, description=description)

def _usage_cache() -> tuple[Column, ...]:
    """A round's prefix-cache hits as the engine's usage states them (cached tokens per request)."""
    return (
        Column("usage_prompt_tokens", "int", min_value=0),
        Column("usage_cached_tokens", "int", min_value=0),
        Column("usage_hit_rate", "float", min_value=0.0, max_value=1.0,
               description="Cached over prompt tokens from the engine's usage, where it reports them."),
        Column("cached_reported", "int", nullable=False, min_value=0,
               description="Requests whose usage reported cached tokens."),
    )


def _round_load() -> tuple[Column, ...]:
    """A round's load: a concurrency (closed loop) or an arrival rate (open loop), exactly one set
    (PROTOCOL.md section 6, "Closed and open loop")."""
    return (
        Column("concurrency", "int", min_value=1,
               description="Closed loop: the requests kept in flight. Null in an open-loop (rate) round."),
        Column("rate_rps", "float", min_value=0.0,
               description="Open loop: the Poisson arrival rate (req/s). Null in a closed-loop round."),
        Column("max_in_flight", "int", min_value=1,
               description="Open loop: the cap on requests in flight; null: uncapped (every open-loop round so far)."),
    )


REQUESTS = Table(
    "requests",
    _common()
    + (
        *_round_load(),
        Column("launch", "int", nullable=False, min_value=0,
               description="The engine's start the round ran on, within its scenario: 0 the readied deployment, "
                           "1.. a fresh one each (measurement.launches); rounds are numbered on across launches."),
        Column("request_id", "str", nullable=False),
        Column("first_encounter", "bool", nullable=False),
        Column("send_ts", "float", nullable=False, description="Unix time the request was written."),
        _secs("send_bracket_s", description="Stamps before and after the request's write call: the send time's "
              "uncertainty (tens of microseconds; a preemption inside the call widens it)."),
        Column("send_wide", "bool", description="send_bracket_s over 1 ms (client.SEND_BRACKET_WIDE_S): send_ts is the "
               "stamp before the write, so the latencies are not understated."),
        _secs("first_event_s", description="Send to the first streamed event of any kind."),
        _secs("ttft_s", description="Send to the first event carrying visible output."),
        _secs("e2e_s"),
        _secs("tpot_s"),
        Column("itl_s", "list", description="Gaps between consecutive output events."),
        Column("tokens_per_event", "list", description="Tokens each output event carried, where the stream tells."),
        Column("output_events", "int", min_value=0, description="Events that carried visible output."),
        Column("last_event_share", "float", min_value=0.0, max_value=1.0,
               description="Share of the visible output (characters) carried by the last output event."),
        Column("prompt_tokens", "int", min_value=0),
        Column("completion_tokens", "int", min_value=0),
        Column("expected_prompt_tokens", "int", min_value=0),
        Column("expected_completion_tokens", "int", min_value=0),
        Column("length_deviation", "bool", description="usage differs from the requested lengths."),
        Column("status", "str", nullable=False, values=("ok", "error", "timeout")),
        Column("http_status", "int"),
        Column("error", "str"),
    ),
    key=("run_id", "engine", "scenario", "concurrency", "rate_rps", "round", "request_id"),
)

# A replayed trace's requests (tasks/scenarios/trace.py): the requests columns, then the trace's own.
TRACE_REQUESTS = Table(
    "trace_requests",
    REQUESTS.columns
    + (
        Column("trace_line", "int", nullable=False, min_value=1, description="The request's line in the trace file."),
        Column("due_ts", "float", nullable=False,
               description="Unix time the trace said to send it: the replay's start + its arrival / speed."),
        Column("lateness_s", "float", nullable=False,
               description="send_ts - due_ts: how late the client sent it (negative: early, by the send bracket)."),
        Column("expected_cached_tokens", "int", nullable=False, min_value=0,
               description="Prompt tokens in leading blocks an earlier request of the round held whole (the trace's "
                           "own reuse)."),
    ),
    key=("run_id", "engine", "scenario", "round", "request_id"),
)

ROUNDS = Table(
    "rounds",
    _common()
    + (
        *_round_load(),
        Column("launch", "int", nullable=False, min_value=0,
               description="The engine's start the round ran on, within its scenario: 0 the readied deployment, "
                           "1.. a fresh one each (measurement.launches); rounds are numbered on across launches."),
        Column("input_tokens", "int", min_value=1, description="The round's prompt length (its shape)."),
        Column("output_tokens", "int", min_value=1, description="The round's output length (its shape)."),
        Column("first_encounter", "bool", nullable=False),
        Column("warmup", "bool", description="True for warmup rounds (kept, never headline)."),
        Column("requests_ok", "int", nullable=False, min_value=0),
        Column("requests_failed", "int", nullable=False, min_value=0,
               description="With requests_ok, the requests the round sent (its size, in either loop)."),
        Column("error_rate", "float", nullable=False, min_value=0.0),
        Column("status", "str", nullable=False, values=("ok", "failed")),
        _secs("duration_s"),
        Column("request_tps", "float", min_value=0.0),
        Column("output_tps", "float", min_value=0.0),
        *(_secs(f"{lat}_{p}_s") for lat in LATENCIES for p in PERCENTILES),
        Column("goodput_rps", "float", min_value=0.0),
        Column("length_deviations", "int", min_value=0),
        Column("cache_cleared", "bool", description="A dataset round: whether the engine emptied its prefix cache "
                                                    "before it (false: it could not or did not, so rows may have "
                                                    "been served from cache); null for other scenarios."),
    ),
    key=("run_id", "engine", "scenario", "concurrency", "rate_rps", "round"),
)

CHECKS = Table(
    "checks",
    _common()
    + (
        Column("check", "str", nullable=False),
        Column("outcome", "str", nullable=False, values=("pass", "fail", "not_applicable")),
        Column("evidence", "json", nullable=False, description="status, field seen, short excerpt."),
    ),
    key=("run_id", "engine", "scenario", "check"),
)

NEEDLES = Table(
    "needles",
    _common()
    + (
        Column("target_tokens", "int", nullable=False, min_value=1),
        Column("prompt_tokens", "int", min_value=0),
        Column("depth", "float", nullable=False, min_value=0.0),
        Column("attempt", "int", nullable=False, min_value=1),
        Column("first_encounter", "bool"),
        _secs("ttft_s"),
        _secs("e2e_s"),
        Column("expected", "str", nullable=False),
        Column("answer", "str"),
        Column("passed", "bool", nullable=False),
        Column("status", "str", nullable=False, values=("ok", "error", "timeout")),
        Column("error", "str"),
        Column("cache_cleared", "bool", description="The prefix cache was emptied just before this request."),
        Column("stream_defect", "str",
               description="Why this stream did not deliver its output as generated (tasks/stats/reliability.py); "
                           "any such stream makes the engine's TTFT unreliable."),
    ),
    key=("run_id", "engine", "scenario", "target_tokens", "depth", "attempt"),
)

CACHE_TRIALS = Table(
    "cache_trials",
    _common()
    + (
        Column("trial", "int", nullable=False, min_value=0, description="0 = cold."),
        _secs("ttft_s"),
        _secs("e2e_s"),
        Column("prompt_tokens", "int", min_value=0),
        Column("cached_tokens", "int", min_value=0, description="usage's cached tokens, where reported."),
        Column("server_queries_delta", "float", min_value=0.0),
        Column("server_hits_delta", "float", min_value=0.0),
        Column("deltas_unpublished", "str",
               description="Why the server deltas are null: a counter fell or the engine restarted in the trial."),
        Column("status", "str", nullable=False, values=("ok", "error", "timeout")),
        Column("error", "str"),
        Column("cache_cleared", "bool", description="Trial 0 only: the cache was emptied just before it."),
    ),
    key=("run_id", "engine", "trial"),
)

SERVER_METRICS = Table(
    "server_metrics",
    _common()
    + (
        Column("scrape_ts", "float", nullable=False),
        Column("phase", "str", nullable=False, description="When the scrape was taken, e.g. before_trial_0."),
        Column("metric", "str", nullable=False),
        Column("labels", "json"),
        Column("value", "float"),
    ),
)

STARTUP_FINDINGS = Table(
    "startup_findings",
    _common()
    + (
        Column("finding", "str", nullable=False),
        Column("severity", "str", nullable=False, values=("info", "warning", "error")),
        Column("line", "str", nullable=False),
    ),
)

REGRESSIONS = Table(
    "regressions",
    _common()
    + (
        Column("concurrency", "int"),
        Column("metric", "str", nullable=False),
        Column("baseline_run_id", "str"),
        Column("baseline_kind", "str", values=("last_good", "reference"),
               description="last_good: the last run that passed its comparison (or was accepted); reference: the "
               "level a person last accepted, else the lineage's first good run (tasks/compare/nightly.py)."),
        Column("baseline_value", "float"),
        Column("value", "float"),
        Column("change", "float", description="Change of the median over rounds: value / baseline_value - 1."),
        Column("threshold", "float"),
        Column("regressed", "bool", nullable=False),
        Column("ratio", "float", min_value=0.0,
               description="Ratio new/baseline of the geometric means of the round values (tasks/stats/effects.py)."),
        Column("ci_low", "float", description="Lower end of the ratio's confidence interval; for failed_share, of "
               "the difference of the shares now - then (Newcombe), which may be negative."),
        Column("ci_high", "float", description="Upper end of the ratio's (or the share difference's) interval."),
        Column("covers", "str", description="What variation the interval covers: round-to-round noise within one "
               "deployment, and the lineage's run-to-run variation where its history was enough."),
        Column("verdict", "str", description="The effect's verdict (higher, lower, no detectable difference, not "
               "enough rounds), or a check, needle or cache verdict's outcome then and now (pass -> fail)."),
    ),
)

def _round_level() -> tuple[Column, ...]:
    """The level and shape of the round a per-round row belongs to (engine, client, GPU rows)."""
    return (
        *_round_load()[:2],
        Column("input_tokens", "int", min_value=1),
        Column("output_tokens", "int", min_value=1),
        Column("warmup", "bool"),
    )


ENGINE_ROUNDS = Table(
    "engine_rounds",
    _common()
    + (
        *_round_level(),
        Column("scrape_before_ts", "float", description="Unix time of the /metrics scrape before the first send."),
        Column("scrape_after_ts", "float", description="Unix time of the /metrics scrape after the last completion."),
        Column("deltas_unpublished", "str",
               description="Why the counter and histogram figures are null: no /metrics, a counter fell, a restart."),
        Column("preemption_metric", "str", description="The engine's counter: vLLM preemptions, SGLang retractions."),
        Column("preemptions", "float", min_value=0.0, description="Requests preempted (retracted) in the round."),
        Column("preempted", "bool", description="The engine preempted or retracted at least one request."),
        Column("gauge_samples", "int", min_value=0, description="Readings of the gauges taken while the round ran."),
        Column("kv_usage_peak", "float", min_value=0.0, max_value=1.0, description="Highest KV cache usage read."),
        Column("kv_usage_mean", "float", min_value=0.0, max_value=1.0),
        Column("waiting_peak", "float", min_value=0.0, description="Most requests the engine held queued (deferred)."),
        Column("waiting_mean", "float", min_value=0.0),
        Column("running_peak", "float", min_value=0.0),
        Column("running_mean", "float", min_value=0.0),
        _secs("queue_time_mean_s", description="The engine's own queue time, histogram mean over the round."),
        Column("server_requests", "float", min_value=0.0, description="Requests in the server's TTFT histogram delta."),
        _secs("server_ttft_mean_s", description="The engine's own TTFT: histogram _sum/_count deltas."),
        _secs("server_ttft_p50_s", description="Bucket-interpolated (Prometheus histogram_quantile)."),
        _secs("server_ttft_p99_s", description="Bucket-interpolated (Prometheus histogram_quantile)."),
        _secs("server_itl_mean_s", description="The engine's own inter-token latency: histogram _sum/_count deltas."),
        _secs("server_itl_p50_s", description="Bucket-interpolated (Prometheus histogram_quantile)."),
        _secs("server_itl_p99_s", description="Bucket-interpolated (Prometheus histogram_quantile)."),
        _secs("server_e2e_mean_s"),
        _secs("client_ttft_mean_s", description="DayOne's TTFT mean for the same round (rounds.ttft_mean_s)."),
        _secs("client_ttft_p50_s", description="rounds.ttft_p50_s (a failed request counts as unbounded)."),
        _secs("client_ttft_p99_s", description="rounds.ttft_p99_s (a failed request counts as unbounded)."),
        _secs("client_itl_mean_s", description="DayOne's ITL mean (rounds.itl_mean_s): every gap between consecutive "
              "streamed output events of the round's ok requests pooled, one observation per gap, as the engine's "
              "histogram counts one per request and step."),
        _secs("client_itl_p50_s", description="rounds.itl_p50_s."),
        _secs("client_itl_p99_s", description="rounds.itl_p99_s."),
        _secs("client_tpot_mean_s", description="DayOne's TPOT mean (rounds.tpot_mean_s): per request, then averaged."),
        Column("ttft_gap_s", "float", description="client_ttft_mean_s - server_ttft_mean_s; null with "
               "timing_gap_unpublished."),
        Column("itl_gap_s", "float", description="client_itl_mean_s - server_itl_mean_s; null with "
               "timing_gap_unpublished."),
        Column("tpot_gap_s", "float", description="client_tpot_mean_s - server_itl_mean_s; null with "
               "timing_gap_unpublished."),
        _secs("client_e2e_mean_s", description="DayOne's E2E mean for the same round (rounds.e2e_mean_s)."),
        Column("e2e_gap_s", "float", description="client_e2e_mean_s - server_e2e_mean_s: the client's whole "
               "stream against the engine's, on the clock of the TTFT gap (vLLM stamps its ITL in the engine core, its "
               "TTFT and E2E in the frontend); null with timing_gap_unpublished."),
        Column("timing_gap_unpublished", "str", description="Why a gap is null: the window's deltas void, the engine "
               "timed other requests than the client's, or not_exposed (the engine has no such histogram)."),
        Column("ttft_gap_finding", "str", description="Set when the gap is large: both numbers, in words."),
        Column("itl_gap_finding", "str", description="Set when the ITL gap is large: both numbers, in words (the "
               "client's token timing is not trustworthy in that round)."),
        Column("spec_drafts", "float", min_value=0.0, description="Speculative verification steps in the round."),
        Column("spec_draft_tokens", "float", min_value=0.0),
        Column("spec_accepted_tokens", "float", min_value=0.0),
        Column("spec_acceptance_rate", "float", min_value=0.0, max_value=1.0,
               description="Accepted / drafted tokens (SGLang: its gauge)."),
        Column("spec_mean_accepted_length", "float", min_value=0.0,
               description="1 + accepted / drafts: tokens per verification step, bonus token included."),
        Column("not_exposed", "json", description="Figures this engine does not expose, with why."),
    ),
    key=("run_id", "engine", "scenario", "input_tokens", "output_tokens", "concurrency", "rate_rps", "round"),
)

CLIENT_SHARDS = Table(
    "client_shards",
    _common()
    + (
        *_round_level(),
        Column("shards", "int", nullable=False, min_value=1, description="Client processes that shared the round."),
        Column("shards_reason", "str", description="Why that many: the run config's number, or auto's count of the "
               "streams and of the cores free (affinity, a server on this host, other busy processes)."),
        Column("shard", "int", nullable=False, min_value=0, description="This process; 0 in a round of one."),
        Column("requests", "int", min_value=0, description="Requests this process sent."),
        Column("offset_s", "float", nullable=False,
               description="Its clock (Unix time) minus the round's parent process's at the same moment; 0 for one "
               "process."),
        _secs("uncertainty_s", nullable=False, description="Half the round trip of the ping that measured the offset."),
        _secs("wall_s", description="Its run: from the common start to its last completion."),
        _secs("cpu_s", description="CPU its process used over the run (all its threads)."),
        _secs("waited_s", description="Time its event loop was runnable but had no core, other processes having it "
              "(Linux schedstat; null elsewhere)."),
        Column("waited_share", "float", min_value=0.0, max_value=1.0,
               description="waited_s / wall_s: above 0.05 the round was measured on a busy machine."),
        Column("pod", "int", nullable=False, min_value=0, description="The runner pod this process ran in (0: the "
               "step's own pod, or the worker); its offset_s is its pod's offset plus its own within the pod."),
        Column("pods", "int", nullable=False, min_value=1, description="Runner pods that measured the round together "
               "(kubernetes.measure_from: cluster); 1 elsewhere."),
        Column("pod_cores", "int", min_value=1, description="Whole cores each of those runner pods had "
               "(kubernetes.runner.cpu); null off the cluster's shards."),
    ),
    key=("run_id", "engine", "scenario", "input_tokens", "output_tokens", "concurrency", "rate_rps", "round", "shard"),
)

TELEMETRY_ROUNDS = Table(
    "telemetry_rounds",
    _common()
    + (
        *_round_level(),
        Column("gpus", "int", min_value=1, description="GPUs of the engine the DCGM exporter reported."),
        Column("gpu_uuids", "json", description="Their UUIDs."),
        Column("started_ts", "float", description="Unix time of the reading before the first send."),
        Column("ended_ts", "float", description="Unix time of the reading after the last completion."),
        Column("samples", "int", nullable=False, min_value=0, description="Readings taken while the round ran."),
        Column("reads_failed", "int", min_value=0, description="Readings that failed (a hole: voids the energy)."),
        Column("gpus_known", "bool", description="The GPUs read are the engine's (UUIDs named, or the simulator's own); "
               "false: the exporter's every GPU, energy withheld."),
        Column("exporter_refresh_s", "float", min_value=0.0, description="The exporter's refresh interval measured in "
               "the round: mean time between the readings whose values changed; null under two changes."),
        Column("exporter_changes", "json", description="Unix times at which the exporter's values changed (its own "
               "timestamps where it exposes them)."),
        Column("gpu_util_mean_pct", "float", min_value=0.0, max_value=100.0,
               description="DCGM_FI_DEV_GPU_UTIL, mean over the engine's GPUs, mean over the readings."),
        Column("gpu_util_peak_pct", "float", min_value=0.0, max_value=100.0),
        Column("memory_used_peak_mib", "float", min_value=0.0,
               description="DCGM_FI_DEV_FB_USED summed over the engine's GPUs, highest reading."),
        Column("power_mean_w", "float", min_value=0.0,
               description="DCGM_FI_DEV_POWER_USAGE summed over the engine's GPUs, mean over the readings."),
        Column("power_peak_w", "float", min_value=0.0),
        Column("energy_j", "float", min_value=0.0, description="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION delta (mJ) "
               "from the reading before the round to the one after, summed over the GPUs, in joules; only where the "
               "round spans 10 of the exporter's refreshes (telemetry.MIN_REFRESHES)."),
        Column("energy_unpublished", "str", description="Why energy_j is null: a counter fell (reset), a reading missed, "
               "the GPUs unknown, or the round too short for the exporter's refresh."),
        Column("energy_void", "str", description="Why the round's energy readings serve neither the round nor its "
               "level's window (a reset, a hole, GPUs unknown)."),
        Column("energy_first_mj", "json", description="The energy counter per GPU UUID at the round's first reading."),
        Column("energy_last_mj", "json", description="The energy counter per GPU UUID at the round's last reading."),
        Column("ok_output_tokens", "int", min_value=0, description="Output tokens of the round's ok requests."),
        Column("usage_unknown", "int", min_value=0, description="Ok requests whose usage did not say their tokens."),
        Column("energy_per_output_token_j", "float", min_value=0.0, description="Joules per output token: energy_j / ok_output_tokens."),
        Column("readings", "json", description="[seconds from the first reading, utilization %, power W, memory MiB] "
               "per reading."),
        Column("memory_cards", "json", description="Memory per GPU UUID, [used MiB, total MiB], at the reading before "
               "the round (\"before\") and after it (\"after\"): DCGM_FI_DEV_FB_USED, and DCGM_FI_DEV_FB_TOTAL or "
               "FB_FREE + FB_USED (total null where neither is exposed)."),
        Column("unavailable", "str", description="Why there are no figures: the exporter unreadable, none of the GPUs."),
        Column("not_exposed", "json", description="Figures the exporter did not give, with why."),
    ),
    key=("run_id", "engine", "scenario", "input_tokens", "output_tokens", "concurrency", "rate_rps", "round"),
)

CAPACITY = Table(
    "capacity",
    _common()
    + (
        Column("probe", "int", nullable=False, min_value=1, description="The probe's place in the search, from 1."),
        Column("phase", "str", nullable=False, values=("bracket", "bisect")),
        Column("mode", "str", nullable=False, values=("concurrency", "rate")),
        Column("concurrency", "int", min_value=1, description="The probed concurrency (mode concurrency; null in "
               "mode rate)."),
        Column("rate_rps", "float", min_value=0.0, description="The probed arrival rate (mode rate only; rounds "
               "uncapped in flight)."),
        Column("input_tokens", "int", nullable=False, min_value=1),
        Column("output_tokens", "int", nullable=False, min_value=1),
        Column("rounds", "int", nullable=False, min_value=1,
               description="Measured rounds at this load (rounds table: scenario capacity, rounds 1..n)."),
        Column("requests", "int", nullable=False, min_value=0),
        Column("requests_good", "int", nullable=False, min_value=0, description="Requests that met every SLO."),
        Column("round_shares", "list", description="Each round's goodput share."),
        Column("goodput_share", "float", min_value=0.0, max_value=1.0, description="requests_good / requests."),
        Column("ci_low", "float", min_value=0.0, max_value=1.0,
               description="Lower end of the share's interval: Wilson on the requests, widened by a t on the rounds."),
        Column("ci_high", "float", min_value=0.0, max_value=1.0),
        Column("target_goodput_share", "float", nullable=False, min_value=0.0, max_value=1.0),
        Column("confidence", "float", nullable=False, min_value=0.0, max_value=1.0),
        Column("verdict", "str", nullable=False, values=("pass", "fail")),
        Column("close", "bool", nullable=False,
               description="The interval still held the target after the extra rounds: decided by the point estimate."),
        Column("decided_by", "str", nullable=False, values=("interval", "point estimate")),
    ),
    key=("run_id", "engine", "probe"),
)

KV_CAPACITY = Table(
    "kv_capacity",
    _common()
    + (
        Column("dialect", "str", nullable=False),
        Column("kv_tokens", "int", min_value=0,
               description="Tokens the KV cache holds, as the engine's startup log states."),
        Column("kv_cache_gib", "float", min_value=0.0, description="KV cache memory (GiB), from the startup log."),
        Column("weights_gib", "float", min_value=0.0,
               description="Memory the weights took (GiB), from the startup log."),
        Column("engine_context_tokens", "int", min_value=1,
               description="The per-request context the engine sized itself for (vLLM max_model_len, SGLang "
               "context_len, llama.cpp n_ctx_seq)."),
        Column("max_concurrency", "float", min_value=0.0,
               description="Requests at engine_context_tokens the KV cache holds at once."),
        Column("max_concurrency_source", "str", values=("engine log", "KV tokens / context")),
        Column("configured_context_tokens", "int", nullable=False, min_value=1,
               description="model.context_limit_tokens of the run config."),
        Column("fits_context", "bool",
               description="One request at the configured context limit fits the KV cache and the engine's context."),
        Column("fit_detail", "str", nullable=False, description="Why, with both numbers."),
        Column("not_logged", "json", description="Figures the startup log did not state."),
        Column("log_lines", "json", description="The startup log lines the figures were read from."),
    ),
    key=("run_id", "engine"),
)

QUALITY = Table(
    "quality",
    _common()
    + (
        Column("family", "str", nullable=False,
               values=("kv_retrieval", "copy_reverse", "arithmetic", "sorting", "json_schema", "multi_turn_recall",
                       "tool_call", "eval_set")),
        Column("item_id", "str", nullable=False, description="The item of the seed's task set (tasks/quality/items.py)."),
        Column("context_tokens", "int", min_value=1, description="kv_retrieval: the table's approximate length."),
        Column("match_rule", "str", nullable=False, values=("exact", "numeric", "json", "tool_args", "regex")),
        Column("prompt_sha256", "str", nullable=False, description="Digest of the messages and tools sent."),
        Column("prompt_tail", "str", nullable=False, description="The end of the last user message: the question."),
        Column("expected", "str", nullable=False, description="The expected answer, as JSON text."),
        Column("answer", "str", description="The content, or the tool call's arguments; null when the request failed."),
        Column("correct", "bool", nullable=False),
        Column("status", "str", nullable=False, values=("ok", "error")),
        Column("error", "str"),
        _secs("latency_s", nullable=False),
        Column("reask_answer", "str", description="The answer to the same request sent again where the first was wrong "
                                                  "or failed (scenarios.quality.reask_wrong); null otherwise."),
        Column("reask_correct", "bool", description="The re-ask's verdict: false confirms the wrong answer; true makes "
                                                    "the item unstable, never a change; null: not re-asked."),
    ),
    key=("run_id", "engine", "scenario", "item_id"),
)

LOGLIK = Table(
    "loglik",
    _common()
    + (
        Column("length_tokens", "int", nullable=False, min_value=1, description="The fixed text's target length."),
        Column("text_sha256", "str", nullable=False, description="Digest of the text scored: the same on every engine."),
        Column("prompt_tokens", "int", min_value=2, description="The tokens the engine scored; null unless ok."),
        Column("mean_nll_nats", "float", min_value=0,
               description="Mean negative log-likelihood per token (nats) over the prompt's tokens after the first."),
        Column("status", "str", nullable=False, values=("ok", "not_applicable", "error")),
        Column("reason", "str", description="Why not measured: the dialect has no prompt log-probabilities, or the error."),
        _secs("latency_s"),
    ),
    key=("run_id", "engine", "scenario", "length_tokens"),
)

HARDWARE = Table(
    "hardware",
    _common()
    + (
        Column("target", "str", nullable=False, values=("local", "kubernetes")),
        Column("node", "str", description="The Kubernetes node, or a hash of this machine's host name."),
        Column("gpu_product", "str", description="nvidia.com/gpu.product, or nvidia-smi's name."),
        Column("gpu_memory_mib", "int", min_value=0, description="Memory per GPU (MiB)."),
        Column("gpu_count", "int", min_value=0, description="GPUs the engine was given (0: none, a CPU engine)."),
        Column("driver_version", "str"),
        Column("cuda_version", "str", description="The CUDA version the driver supports."),
        Column("gpu_uuids", "json", description="The GPUs the engine got, as seen from inside its pod or process."),
        Column("cpu_model", "str", description="Local target: this machine's CPU."),
        Column("cpu_cores", "int", min_value=1),
        Column("sources", "json", nullable=False, description="Where each figure came from."),
        Column("unknown", "json", description="Figures no source stated, with why."),
    ),
    key=("run_id", "engine"),
)

SESSION_TURNS = Table(
    "session_turns",
    _common()
    + (
        Column("concurrency", "int", min_value=1, description="Sessions in flight at once (arrival fixed)."),
        Column("rate_rps", "float", min_value=0.0, description="Session arrivals per second (arrival poisson)."),
        Column("session", "int", nullable=False, min_value=0),
        Column("turn", "int", nullable=False, min_value=0, description="0 = the session's first message."),
        Column("request_id", "str", description="Null where the turn was never sent."),
        Column("send_ts", "float"),
        _secs("think_s", nullable=False, description="The wait before this turn, drawn from the seed (0 first)."),
        Column("messages_sent", "int", nullable=False, min_value=0,
               description="Messages the turn carried: every earlier one, answers included, and the new one."),
        _secs("ttft_s"),
        _secs("e2e_s"),
        _secs("tpot_s"),
        Column("prompt_tokens", "int", min_value=0, description="The whole conversation, as usage counted it."),
        Column("completion_tokens", "int", min_value=0),
        Column("cached_tokens", "int", min_value=0,
               description="Prompt tokens the engine served from its cache, where its usage reports them."),
        Column("length_deviation", "bool"),
        Column("first_encounter", "bool", nullable=False,
               description="The turn's bucketed shape was new to the server when the round began."),
        Column("status", "str", nullable=False, values=("ok", "error", "timeout", "not_sent"),
               description="not_sent: an earlier turn of the session failed, so this conversation never existed."),
        Column("http_status", "int"),
        Column("error", "str"),
    ),
    key=("run_id", "engine", "concurrency", "rate_rps", "round", "session", "turn"),
)

SHARED_PREFIX_ROUNDS = Table(
    "shared_prefix_rounds",
    _common()
    + (
        Column("concurrency", "int", nullable=False, min_value=1),
        Column("groups", "int", nullable=False, min_value=1),
        Column("prefix_tokens", "int", nullable=False, min_value=1),
        Column("suffix_tokens", "int", nullable=False, min_value=1),
        Column("requests_per_group", "int", nullable=False, min_value=1),
        Column("requests_ok", "int", min_value=0),
        Column("requests_failed", "int", min_value=0),
        Column("expected_reuse", "float", nullable=False, min_value=0.0, max_value=1.0,
               description="Share of the round's prompt tokens an exact prefix cache serves."),
        *_usage_cache(),
        Column("server_queries_delta", "float", min_value=0.0),
        Column("server_hits_delta", "float", min_value=0.0),
        Column("server_hit_rate", "float", min_value=0.0, max_value=1.0,
               description="The engine's prefix-cache counters over the round (adapter arithmetic)."),
        Column("deltas_unpublished", "str", description="Why the counters' hit rate is null."),
        _secs("ttft_p50_s"),
        _secs("e2e_p50_s"),
        Column("first_encounter", "bool"),
        Column("status", "str", values=("ok", "failed")),
    ),
    key=("run_id", "engine", "concurrency", "round"),
)

# The user's own prompts, a row a round (tasks/scenarios/dataset.py): lengths and cache hits from usage.
DATASET_ROUNDS = Table(
    "dataset_rounds",
    _common()
    + (
        Column("concurrency", "int", min_value=1, description="Users in flight (arrival closed)."),
        Column("rate_rps", "float", min_value=0.0, description="Poisson arrivals per second (arrival poisson)."),
        Column("source", "str", nullable=False, description="The dataset: a file path or an S3 key."),
        Column("rows_sent", "int", nullable=False, min_value=0, description="Requests the round sent, a row each."),
        Column("chat_rows", "int", nullable=False, min_value=0, description="Rows sent as messages (chat API)."),
        Column("requests_ok", "int", min_value=0),
        Column("requests_failed", "int", min_value=0),
        Column("prompt_tokens_p50", "float", min_value=0.0, description="Median prompt length, from usage."),
        Column("completion_tokens_p50", "float", min_value=0.0, description="Median output length, from usage."),
        *_usage_cache(),
        Column("cache_cleared", "bool",
               description="The prefix cache was emptied before the round; null: the engine has no clear endpoint."),
        _secs("ttft_p50_s"),
        _secs("e2e_p50_s"),
        Column("output_tps", "float", min_value=0.0),
        Column("first_encounter", "bool"),
        Column("status", "str", values=("ok", "failed")),
    ),
    key=("run_id", "engine", "concurrency", "rate_rps", "round"),
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (REQUESTS, ROUNDS, CHECKS, NEEDLES, CACHE_TRIALS, SERVER_METRICS, STARTUP_FINDINGS, REGRESSIONS,
              ENGINE_ROUNDS, CAPACITY, KV_CAPACITY, HARDWARE, CLIENT_SHARDS, TELEMETRY_ROUNDS, QUALITY,
              LOGLIK, SESSION_TURNS, SHARED_PREFIX_ROUNDS, TRACE_REQUESTS, DATASET_ROUNDS)
}

_PANDAS = {"str": "string", "int": "Int64", "float": "Float64", "bool": "boolean"}


def to_frame(table: Table | str, rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Rows -> a frame with exactly the table's columns, in order, with nullable dtypes.

    Unknown keys are an error: a writer that invents a column must add it to the schema first.
    """
    import pandas as pd

    t = TABLES[table] if isinstance(table, str) else table
    rows = list(rows)
    names = set(t.column_names)
    for r in rows:
        extra = set(r) - names
        if extra:
            raise KeyError(f"{t.name}: columns not in the schema: {sorted(extra)}")
    frame = pd.DataFrame(rows, columns=t.column_names)
    dtypes = _pandas_dtypes()
    # Each column converted apart and the frame built once: assigning them back one by one cost pandas a pass
    # over the frame's blocks per column, a fifth of a nightly test's CPU (bench/RESULTS.md, 2026-12-04).
    columns: dict[str, pd.Series] = {}
    for c in t.columns:
        if c.dtype in dtypes:
            columns[c.name] = frame[c.name].astype(dtypes[c.dtype])
        elif c.dtype == "json":
            columns[c.name] = frame[c.name].map(
                lambda v: v if v is None or isinstance(v, str) else json.dumps(v, sort_keys=True)
            ).astype(dtypes["str"])
        else:  # list: keep Python lists (Parquet list column); CSV writer serialises them
            columns[c.name] = frame[c.name].map(lambda v: None if v is None else [float(x) for x in v])
    return pd.DataFrame(columns, index=frame.index, columns=t.column_names)


@functools.cache
def _pandas_dtypes() -> dict[str, Any]:
    """_PANDAS's dtypes resolved once (pandas looks a dtype's name up in its registry at every astype)."""
    from pandas.api.types import pandas_dtype

    return {kind: pandas_dtype(name) for kind, name in _PANDAS.items()}


def _scrubbed_text(value: str) -> str:
    """One text cell through the one scrubber; JSON text (evidence) is parsed so secret-named keys go too."""
    from tasks.core.desensitize import desensitize

    if value[:1] in "{[":
        try:
            doc = json.loads(value)
        except ValueError:
            doc = None
        if isinstance(doc, (dict, list)):
            clean = desensitize(doc)
            return value if clean == doc else json.dumps(clean, sort_keys=True)
    return desensitize(value)


def publishable(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as it may leave the run: every text cell (errors, evidence, startup log lines) scrubbed
    of secrets, internal hosts and IPs. Every published table (archive and CLIs) is written through here."""
    import pandas as pd

    out = frame.copy()
    for col in out.columns:
        if pd.api.types.is_string_dtype(out[col].dtype):  # text columns, and object columns (lists pass as they are)
            out[col] = out[col].map(lambda v: _scrubbed_text(v) if isinstance(v, str) else v).astype(out[col].dtype)
    return out


def to_csv_bytes(frame: pd.DataFrame) -> bytes:
    out = publishable(frame)
    for col in out.columns:
        if out[col].dtype == object:
            out[col] = out[col].map(lambda v: json.dumps(v) if isinstance(v, list) else v)
    return out.to_csv(index=False, lineterminator="\n").encode()


def to_parquet_bytes(frame: pd.DataFrame) -> bytes:
    import io

    buf = io.BytesIO()
    publishable(frame).to_parquet(buf, index=False, engine="pyarrow")
    return buf.getvalue()
