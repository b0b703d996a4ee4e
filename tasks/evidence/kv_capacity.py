"""Memory and KV capacity as the engine itself states it: one `kv_capacity` row per engine, read from
its startup log by its adapter (EngineAdapter.startup_memory), and the KV usage it reached per scenario
(from the engine_rounds gauges).

Whether one request at the configured context limit (model.context_limit_tokens) fits is judged on
two numbers the engine logged: the tokens its KV cache holds, and the context it sized each request
for. A KV cache that holds fewer tokens than the limit, or an engine that serves a shorter context,
cannot take such a request whole; a figure missing from the log leaves the answer unknown (None),
never a guess.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tasks.engines import EngineAdapter
from tasks.engines.base import StartupMemory

FIGURES = ("kv_tokens", "kv_cache_gib", "weights_gib", "context_tokens", "max_concurrency")


def fits_context(memory: StartupMemory, configured_tokens: int) -> tuple[bool | None, str]:
    """(fits, why in words) for one request of `configured_tokens` on this KV cache."""
    kv, served = memory.kv_tokens, memory.context_tokens
    if kv is None:
        return None, "the engine's startup log does not state its KV cache size"
    if kv < configured_tokens:
        return False, (f"the KV cache holds {kv:,} tokens, fewer than the configured context limit of "
                       f"{configured_tokens:,}: one request at the limit cannot be held whole")
    if served is not None and served < configured_tokens:
        return False, (f"the engine serves at most {served:,} tokens per request, below the configured context "
                       f"limit of {configured_tokens:,}")
    times = kv / configured_tokens
    return True, (f"the KV cache holds {kv:,} tokens: {times:.2f} requests at the configured context limit of "
                  f"{configured_tokens:,}" + ("" if served is not None else
                                                " (the engine's own per-request context is not in its log)"))


def kv_capacity_row(keys: Mapping[str, Any], adapter: EngineAdapter, startup_log: str,
                    configured_context_tokens: int) -> dict[str, Any]:
    """The engine's `kv_capacity` row from its startup log."""
    memory = adapter.startup_memory(startup_log)
    fits, why = fits_context(memory, configured_context_tokens)
    missing = {f: memory.unread.get(f, "not in the startup log") for f in FIGURES if getattr(memory, f) is None}
    if adapter.dialect == "openai":
        missing = {f: "a generic OpenAI-compatible server states none of it" for f in FIGURES}
    return {
        **keys,
        "dialect": adapter.dialect,
        "kv_tokens": memory.kv_tokens,
        "kv_cache_gib": memory.kv_cache_gib,
        "weights_gib": memory.weights_gib,
        "engine_context_tokens": memory.context_tokens,
        "max_concurrency": memory.max_concurrency,
        "max_concurrency_source": None if memory.max_concurrency is None else
        "engine log" if memory.max_concurrency_logged else "KV tokens / context",
        "configured_context_tokens": configured_context_tokens,
        "fits_context": fits,
        "fit_detail": why,
        "not_logged": missing or None,
        "log_lines": list(memory.lines),
    }


def peak_kv_by_scenario(engine_rounds: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The highest KV usage (0..1) the engine's gauge read in each scenario's rounds, warmup rounds
    included under their own scenario name."""
    peaks: dict[str, float] = {}
    for r in engine_rounds:
        value = r.get("kv_usage_peak")
        if value is None:
            continue
        scenario = str(r.get("scenario"))
        peaks[scenario] = max(float(value), peaks.get(scenario, 0.0))
    return peaks
