"""summary.json's traffic part: multi-turn sessions per turn index, and shared-prefix reuse per level."""

from __future__ import annotations

from pydantic import Field

from tasks.report.schema.base import Doc
from tasks.report.schema.perf import FirstEncounter


class SessionTurn(Doc):
    """One turn index over every session and round of a level; None where not measured or not published."""

    turn: int
    sent: int
    ok: int
    ttft_median_s: float | None
    ttft_median_interval_s: tuple[float, float] | None  # distribution-free interval of the median
    e2e_median_s: float | None
    prompt_tokens_median: float | None
    cached_share: float | None  # cached over prompt tokens, pooled, where the engine reports cached tokens
    cached_share_interval: tuple[float, float] | None  # t interval over the rounds' shares
    cached_reported: int


class SessionsLevel(Doc):
    concurrency: int | None
    rate_rps: float | None
    sessions: int
    sessions_broken: int  # a failed turn ends its session
    turns_failed: int
    turns_not_sent: int
    turns: list[SessionTurn]


class Sessions(Doc):
    levels: list[SessionsLevel]
    ttft_withheld: str | None = None  # why TTFT is not shown (the engine's stream timing was not reliable)


class ReuseFigure(Doc):
    median: float | None
    interval: tuple[float, float] | None
    rounds: int


class SharedPrefixLevel(Doc):
    concurrency: int
    input_tokens: int
    output_tokens: int
    expected_reuse: float | None
    usage_hit_rate: ReuseFigure  # from the engine's usage (cached tokens per request)
    server_hit_rate: ReuseFigure  # from the engine's prefix-cache counters over each round
    ttft_p50_s: float | None
    e2e_p50_s: float | None
    output_tps: float | None
    failed_rounds: int
    first_encounter: FirstEncounter | None = None  # the first round of its shape on the server, beside the medians


class SharedPrefix(Doc):
    levels: list[SharedPrefixLevel]
    ttft_withheld: str | None = None


class DatasetLevel(Doc):
    """Your own prompts at one load: lengths from the engine's usage, the cached share, over the rounds."""

    concurrency: int | None
    rate_rps: float | None
    rows: int  # rows sent a round
    prompt_tokens_p50: float | None  # median over rounds of each round's median, from usage
    completion_tokens_p50: float | None
    usage_hit_rate: ReuseFigure  # cached over prompt tokens from usage, where reported
    rounds_cache_cleared: int  # rounds that began with the prefix cache emptied
    rounds: int
    failed_rounds: int


class Dataset(Doc):
    source: str
    levels: list[DatasetLevel]


class Traffic(Doc):
    sessions: Sessions | None = None
    shared_prefix: SharedPrefix | None = None
    dataset: Dataset | None = None
    notes: list[str] = Field(default_factory=list)
