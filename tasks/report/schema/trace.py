"""The trace scenario's part of summary.json: the window replayed and, per round, how closely the client kept
to the trace's schedule and how much of its prompts the trace reused against what the server's cache hit."""

from __future__ import annotations

from pydantic import Field

from tasks.report.schema.base import Doc
from tasks.report.schema.perf import PerfLevel


class TraceWindow(Doc):
    """What the plan read of the window (tasks/traffic/trace_source.py `check_trace`)."""

    source: str
    format: str
    rows: int
    span_s: float  # trace time from the window's first arrival to its last
    replay_s: float  # the same over the speed factor
    offered_rps: float | None
    longest_input_tokens: int
    longest_output_tokens: int
    expected_reuse: float | None  # share of prompt tokens in leading blocks an earlier row held whole
    content_sha256: str | None = None  # of the window's rows as replayed: the same traffic across nights


class TraceRound(Doc):
    round: int
    requests: int
    status: str
    lateness_p50_s: float | None  # sent - due
    lateness_p99_s: float | None
    lateness_max_s: float | None
    behind: bool  # lateness p99 above scenarios.trace.lateness_p99_max_s: the client could not keep up
    peak_in_flight: int  # the most requests in flight at once (open loop: what arrived and had not finished)
    client_processes: int | None = None  # the client processes that sent it (load.client_processes)
    # what their timing threads were granted: realtime, short slice or none (tasks/load/streamed.py timing_priority)
    client_priority: str | None = None
    expected_reuse: float | None
    server_hit_rate: float | None  # the engine's prefix-cache counters over the round (deltas)
    server_queries_delta: float | None
    server_hits_delta: float | None
    hit_rate_unpublished: str | None
    length_deviations: int
    output_tps: float | None
    ttft_p50_s: float | None  # null where the engine's TTFT is not published (`ttft_withheld`)
    ttft_p99_s: float | None
    e2e_p50_s: float | None


class TraceReplay(Doc):
    trace: TraceWindow
    rounds: list[TraceRound]
    behind: bool
    lateness_p99_max_s: float
    # Why each round the client fell behind in is left out of the level (so of the comparisons, the choice and the
    # nightly), naming what to change: tasks/scenarios/trace.py left_out_reason.
    left_out: list[str] = Field(default_factory=list)
    client_processes: int | None = None  # client processes per round (load.client_processes), and why
    client_processes_reason: str | None = None
    engine_restarted: bool = False
    ttft_withheld: str | None = None  # why TTFT is not shown (the engine's TTFT verdict)
    level: PerfLevel | None = None  # the rounds' figures (rounds table) as for a performance level: compared;
    # the rounds of `left_out` are not in it
