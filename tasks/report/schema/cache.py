"""The prefix-cache verdict and its trials."""

from __future__ import annotations

from tasks.report.schema.base import Doc


class PrefixCache(Doc):
    """The prefix-cache verdict (tasks/evidence/cache.py); its TTFT half is None when not published."""

    verdict: str
    reason: str | None = None
    hit_rate: float | None = None
    ttft_decrease: float | None = None
    cold_ttft_s: float | None = None
    hot_ttft_median_s: float | None = None
    engine: str | None = None
    server_queries_delta: float | None = None
    server_hits_delta: float | None = None
    hit_rate_unpublished: str | None = None
    cold_e2e_s: float | None = None
    hot_e2e_median_s: float | None = None
    prompt_tokens: int | None = None
    prompt_text_tokens: int | None = None
    template_tokens: int | None = None
    repeats: int | None = None
    cache_cleared: bool | None = None
    cache_clear_detail: str | None = None
    withheld: str | None = None  # why the TTFT half is not published (the engine's or the trial's streams)
    engine_restarted: bool = False


class CacheTrial(Doc):
    trial: int
    ttft_s: float | None
    e2e_s: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    server_queries_delta: float | None
    server_hits_delta: float | None
    deltas_unpublished: str | None
    status: str | None
    error: str | None
