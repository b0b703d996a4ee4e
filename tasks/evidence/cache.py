"""Prefix-cache evidence: client TTFT and server counters must agree (PROTOCOL.md section 5).

One prompt of about 4,400 tokens: clear the cache, one cold request, then N exact repeats,
sequential. /metrics is scraped just before and just after every request; the hit rate is the
ratio of counter deltas over the whole trial (before the cold request to after the last repeat),
as the GLM-5.3-Flash Day 1 Hands-on report computed it, never a last-value gauge. Every delta
obeys the window rule (tasks/telemetry/window.py): a counter that fell or a restart seen anywhere in the trial leaves
every delta of the trial, and the hit rate, unpublished, with the counter and its fall named.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from tasks.engines.context import EngineContext
from tasks.telemetry import metrics
from tasks.evidence.needles import template_tokens_for
from tasks.load.prompts import CalibrationError, FillerPool, calibrate, plain_text, tokenize_counter
from tasks.stats.reliability import WITHHELD, judge_stream
from tasks.engines.stream import excerpt, stream_post
from tasks.telemetry.window import Window, by_name, hit_rate_over
from tasks.state.partitions import RowWriter
from tasks.state.documents import cache_verdict_doc

SCENARIO = "prefix_cache"
MIN_TTFT_DECREASE = 0.30
MIN_HIT_RATE = 0.50
CACHE_PROMPT_SEED = "prefix-cache"
CACHE_QUESTION = "\n\nSummarise the text above in one sentence."


# ---- arithmetic (pure) -----------------------------------------------------------------------


def ttft_decrease(cold_ttft_s: float, hot_ttfts_s: list[float]) -> float:
    """Fractional fall of the repeats' median TTFT against the cold TTFT (0.566 = 56.6% faster)."""
    if cold_ttft_s <= 0:
        raise ValueError(f"cold_ttft_s must be > 0, got {cold_ttft_s}")
    if not hot_ttfts_s:
        raise ValueError("hot_ttfts_s: at least one repeat is needed")
    return (cold_ttft_s - statistics.median(hot_ttfts_s)) / cold_ttft_s


@dataclass(frozen=True)
class CacheVerdict:
    verdict: str  # effective | unconfirmed
    reason: str
    hit_rate: float | None
    ttft_decrease: float | None
    cold_ttft_s: float | None
    hot_ttft_median_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "hit_rate": self.hit_rate,
            "ttft_decrease": self.ttft_decrease,
            "cold_ttft_s": self.cold_ttft_s,
            "hot_ttft_median_s": self.hot_ttft_median_s,
        }


def cache_verdict(
    cold_ttft_s: float | None,
    hot_ttfts_s: list[float],
    hit_rate: float | None,
    hit_rate_missing: str = "the server's prefix-cache counters were not available",
) -> CacheVerdict:
    """"effective" only when the repeats' TTFT median falls >= 30% against the cold request AND
    the server's hit rate over the whole trial is >= 50%; otherwise "unconfirmed", naming what
    is missing or short."""
    decrease = None
    hot_median = statistics.median(hot_ttfts_s) if hot_ttfts_s else None
    problems: list[str] = []
    if cold_ttft_s is None or cold_ttft_s <= 0:
        problems.append("no client TTFT for the cold request")
    elif not hot_ttfts_s:
        problems.append("no client TTFT for any repeat")
    else:
        decrease = ttft_decrease(cold_ttft_s, hot_ttfts_s)
        if decrease < MIN_TTFT_DECREASE:
            problems.append(
                f"the repeats' TTFT median fell {decrease:.1%} against the cold request "
                f"(needs >= {MIN_TTFT_DECREASE:.0%})"
            )
    if hit_rate is None:
        problems.append(hit_rate_missing)
    elif hit_rate < MIN_HIT_RATE:
        problems.append(f"the server's hit rate over the trial was {hit_rate:.2%} (needs >= {MIN_HIT_RATE:.0%})")
    if problems:
        return CacheVerdict("unconfirmed", "; ".join(problems), hit_rate, decrease, cold_ttft_s, hot_median)
    reason = (
        f"TTFT median of the repeats fell {decrease:.1%} against the cold request and the server's "
        f"hit rate over the trial was {hit_rate:.2%}"
    )
    return CacheVerdict("effective", reason, hit_rate, decrease, cold_ttft_s, hot_median)


def published_verdict(doc: dict[str, Any], ttft: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict as every path publishes it (summary, report, regression, `dayone cache`).

    `ttft` is `reliability.ttft_verdict`'s {reliable, reason}. Where TTFT may not be published,
    the verdict's TTFT half is withheld, and an "effective" verdict, which rested on it, is
    "unconfirmed": one half of the rule cannot be checked. E2E and the server's hit rate stay.
    """
    if ttft.get("reliable", True) or doc.get("withheld"):
        return doc
    why = str(ttft.get("reason") or "TTFT is unreliable").removeprefix(WITHHELD)
    out = {k: (None if "ttft" in k else v) for k, v in doc.items()}
    out["withheld"] = why
    out["verdict"] = "unconfirmed" if doc.get("verdict") == "effective" else doc.get("verdict")
    out["reason"] = (f"the TTFT half of the rule cannot be checked, TTFT is not published: {why}; shown instead: "
                     "E2E cold vs repeats and the server's hit rate")
    return out


# ---- the trial ---------------------------------------------------------------------------------


def _scrape(client: httpx.Client, ctx: EngineContext, phase: str, out: RowWriter) -> dict[str, float] | None:
    """One scrape: its samples become server_metrics rows; returns every series' value (the window
    rule checks each series for a reset; deltas sum them)."""
    ep = ctx.endpoint
    try:
        samples = metrics.scrape_samples(client, ep.base_url, ep.adapter)
    except metrics.MetricsUnavailable:
        return None
    for row in metrics.sample_rows(ep.row_keys(SCENARIO), phase, samples):
        out.write(row)
    return metrics.series_values(samples)


def _missing_counters_reason(ctx: EngineContext, before: dict | None, after: dict | None) -> str:
    adapter = ctx.endpoint.adapter
    if adapter.cache_counters is None:
        return f"{adapter.dialect} has no known prefix-cache counters"
    if before is None or after is None:
        return f"{adapter.metrics_path or 'metrics'} could not be scraped"
    names = (adapter.cache_counters.queries, adapter.cache_counters.hits)
    missing = [n for n in names if n not in by_name(before) or n not in by_name(after)]
    if missing:
        return f"the counters {', '.join(missing)} are not exposed at {adapter.metrics_path}"
    return "the query counter did not move over the trial"


def _read_restarts(restart_count: Callable[[], int | None] | None) -> int | None:
    try:
        return None if restart_count is None else restart_count()
    except Exception:  # noqa: BLE001 -- an unreadable count is unknown, the metrics still speak
        return None


def run_prefix_cache(ctx: EngineContext, restart_count: Callable[[], int | None] | None = None) -> dict[str, Any]:
    """Run the trial, write cache_trials and server_metrics rows, save and return the verdict.

    `restart_count` reads the target's restart count where it knows one (None: /metrics alone)."""
    ep = ctx.endpoint
    spec = ctx.config.scenarios.prefix_cache
    adapter = ep.adapter
    url = ep.base_url.rstrip("/") + "/v1/chat/completions"
    trial_rows: list[dict] = []
    with (
        ep.http_client() as client,
        ctx.run_dir.rows("cache_trials", ep.engine, SCENARIO) as trials_out,
        ctx.run_dir.rows("server_metrics", ep.engine, SCENARIO) as metrics_out,
    ):
        count = tokenize_counter(client, ep.base_url, adapter)
        template_tokens = template_tokens_for(client, ctx, count)
        # Seeded by the run: a prompt no earlier run sent, so the cold request is cold even
        # where the cache cannot be cleared.
        pool = FillerPool(f"{CACHE_PROMPT_SEED}:{ep.run_id}")
        render = lambda words: plain_text(words) + CACHE_QUESTION  # noqa: E731
        try:
            prompt = calibrate(max(1, spec.prompt_tokens - template_tokens), render, count, pool)
        except (CalibrationError, httpx.HTTPError, ValueError, KeyError):
            prompt = calibrate(max(1, spec.prompt_tokens - template_tokens), render, None, pool)  # estimated
        payload = {
            "model": ep.model,
            "messages": [{"role": "user", "content": prompt.text}],
            "stream_options": {"include_usage": True},
            **adapter.exact_output_fields(spec.output_tokens),
        }
        cleared, clear_detail = adapter.clear_cache_when_idle(client, ep.base_url)
        restarts_before = _read_restarts(restart_count)
        scrapes: list[dict[str, float] | None] = []
        defects: list[str] = []  # trials whose stream did not deliver output as generated
        for trial in range(spec.repeats + 1):
            before = _scrape(client, ctx, f"before_trial_{trial}", metrics_out)
            result = stream_post(client, url, payload, adapter)
            why = judge_stream(result) if result.ok else None
            if why:
                defects.append(f"trial {trial}: {why}")
            after = _scrape(client, ctx, f"after_trial_{trial}", metrics_out)
            scrapes += [before, after]
            delta = hit_rate_over(adapter, Window((before, after), f"during trial {trial}"))
            row = {
                **ep.row_keys(SCENARIO),
                "trial": trial,
                "ttft_s": result.ttft_s,
                "e2e_s": result.e2e_s,
                "prompt_tokens": result.prompt_tokens,
                "cached_tokens": adapter.cached_tokens(result.usage),
                "server_queries_delta": delta.queries_delta,
                "server_hits_delta": delta.hits_delta,
                "deltas_unpublished": delta.unpublished,
                "status": "ok" if result.ok else "error",
                "error": None if result.error is None else f"{result.error} {result.body_excerpt}".strip(),
                "cache_cleared": cleared if trial == 0 else None,
            }
            trial_rows.append(row)
        whole = hit_rate_over(adapter, Window(tuple(scrapes), "during the trial", (), restarts_before,
                                              _read_restarts(restart_count)))
        for row in trial_rows:
            if whole.unpublished:  # one window: a restart anywhere in it voids every delta of it
                row.update(server_queries_delta=None, server_hits_delta=None, deltas_unpublished=whole.unpublished)
            trials_out.write(row)
    first_before, last_after = scrapes[0], scrapes[-1]
    cold = trial_rows[0]["ttft_s"] if trial_rows[0]["status"] == "ok" else None
    hot = [r["ttft_s"] for r in trial_rows[1:] if r["status"] == "ok" and r["ttft_s"] is not None]
    missing = (f"the server's hit rate is not published: {whole.unpublished}" if whole.unpublished
               else _missing_counters_reason(ctx, first_before, last_after))
    verdict = cache_verdict(cold, hot, whole.rate, missing)
    doc = verdict.as_dict()
    cold_e2e = trial_rows[0]["e2e_s"]
    hot_e2e = [r["e2e_s"] for r in trial_rows[1:] if r["e2e_s"] is not None]
    doc.update(
        {
            "engine": ep.engine,
            "server_queries_delta": whole.queries_delta,
            "server_hits_delta": whole.hits_delta,
            "hit_rate_unpublished": whole.unpublished,
            "cold_e2e_s": cold_e2e,
            "hot_e2e_median_s": statistics.median(hot_e2e) if hot_e2e else None,
            "prompt_tokens": trial_rows[0]["prompt_tokens"],
            "prompt_text_tokens": prompt.counted_tokens,  # by the tokenize endpoint, template excluded
            "template_tokens": template_tokens,
            "repeats": spec.repeats,
            "cache_cleared": cleared,
            "cache_clear_detail": excerpt(clear_detail),
        }
    )
    doc["withheld"] = None
    if defects:  # the trial's own streams: the rule for TTFT that every measured stream obeys
        doc = published_verdict(doc, {"reliable": False, "reason": (
            f"{len(defects)} of the trial's {spec.repeats + 1} streams did not deliver output as generated "
            f"(e.g. {'; '.join(defects[:2])})")})
    if not cleared:
        doc["reason"] += f"; note: the cache was not cleared before the cold request ({clear_detail})"
    ctx.run_dir.write_json(cache_verdict_doc(ep.engine), doc)
    return doc
