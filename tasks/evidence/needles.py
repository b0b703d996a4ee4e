"""Long-context needles (PROTOCOL.md sections 4 and 5): a 200 is not a pass.

Each trial is a prompt of an exact length (calibrated through the tokenize endpoint where there
is one; the length the engine reports in `usage` is recorded beside it) made of deterministic
filler with `The secret code is XXXX-XXXX.` at a given depth and the question at the end. The
prefix cache is cleared before every request; concurrency 1. The first length runs twice (first
shape, then warmed) and both are kept, the first flagged first_encounter. A needle passes only
when the exact code comes back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from tasks.engines.context import EngineContext
from tasks.load.prompts import (
    CalibrationError,
    FillerPool,
    calibrate,
    find_code,
    make_code,
    measure_template_tokens,
    needle_text,
    tokenize_counter,
)
from tasks.stats.reliability import judge_stream
from tasks.engines.stream import StreamResult, excerpt, stream_post

SCENARIO = "long_context"
ANSWER_CHARS = 500


class LengthOverLimit(ValueError):
    """A configured length does not fit the model's context with the output and template."""


@dataclass(frozen=True)
class NeedleTrial:
    target_tokens: int
    depth: float
    attempt: int
    first_encounter: bool


def refuse_over_limit(ctx: EngineContext, section: str) -> int:
    """The usable length for scenarios.<section>; a configured length over it is refused with a
    clear error before anything is sent."""
    spec = getattr(ctx.config.scenarios, section)
    limit = ctx.config.usable_context_tokens(spec.output_tokens)
    for i, n in enumerate(spec.lengths):
        if n > limit:
            raise LengthOverLimit(
                f"scenarios.{section}.lengths[{i}]: {n} tokens is over the model limit "
                f"({ctx.config.model.context_limit_tokens} minus output {spec.output_tokens} and template "
                f"{ctx.config.model.template_overhead_tokens} = {limit}). Fix: lower it or raise "
                "model.context_limit_tokens"
            )
    return limit


def needle_lengths(ctx: EngineContext) -> list[int]:
    """The configured lengths, plus the model limit minus output and template when asked;
    refused with a clear error, before anything is sent, when one does not fit."""
    spec = ctx.config.scenarios.long_context
    limit = refuse_over_limit(ctx, "long_context")
    lengths = list(dict.fromkeys(spec.lengths))
    if spec.include_model_limit and limit not in lengths:
        lengths.append(limit)
    return lengths


def plan_trials(lengths: list[int], depths: list[float]) -> list[NeedleTrial]:
    """Every (length, depth); the first length twice, attempt 1 flagged first_encounter."""
    trials: list[NeedleTrial] = []
    for i, n in enumerate(lengths):
        for attempt in (1, 2) if i == 0 else (1,):
            trials.extend(NeedleTrial(n, d, attempt, i == 0 and attempt == 1) for d in depths)
    return trials


def _status(result: StreamResult) -> str:
    if result.ok:
        return "ok"
    return "timeout" if result.error and "Timeout" in result.error else "error"


def needle_request(
    client: httpx.Client,
    ctx: EngineContext,
    scenario: str,
    trial: NeedleTrial,
    output_tokens: int,
    prompt_style: str,
    count: Callable[[str], int] | None,
    template_tokens: int,
) -> dict[str, Any]:
    """Clear the cache, send one needle prompt, and return its `needles` row.

    `template_tokens` is what the chat template adds (measured, see `template_tokens_for`).
    """
    ep = ctx.endpoint
    code = make_code(f"{trial.target_tokens}:{trial.depth}")
    overhead = template_tokens if prompt_style == "chat" else 0
    row: dict[str, Any] = {
        **ep.row_keys(scenario),
        "target_tokens": trial.target_tokens,
        "prompt_tokens": None,
        "depth": trial.depth,
        "attempt": trial.attempt,
        "first_encounter": trial.first_encounter,
        "ttft_s": None,
        "e2e_s": None,
        "expected": code,
        "answer": None,
        "passed": False,
        "status": "error",
        "error": None,
        "cache_cleared": None,
        "stream_defect": None,
    }
    try:
        prompt = calibrate(
            max(1, trial.target_tokens - overhead),
            lambda words: needle_text(words, trial.depth, code, prompt_style),
            count,
            FillerPool(),
        )
    except (CalibrationError, httpx.HTTPError, ValueError, KeyError) as exc:
        return {**row, "error": f"prompt not built, nothing sent: {type(exc).__name__}: {exc}"[:500]}
    # max_tokens alone: forcing the full output (ignore_eos) would run text into the code.
    # Greedy: at an engine's default temperature (llama.cpp's is 0.8) a pass would be a draw.
    body: dict[str, Any] = {
        "model": ep.model,
        "max_tokens": output_tokens,
        "temperature": 0.0,
        "stream_options": {"include_usage": True},
    }
    if prompt_style == "chat":
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        path = "/v1/completions"
        body["prompt"] = prompt.text
    cleared, clear_detail = ep.adapter.clear_cache_when_idle(client, ep.base_url)
    result = stream_post(client, ep.base_url.rstrip("/") + path, body, ep.adapter)
    error = None if result.error is None else f"{result.error} {result.body_excerpt}".strip()
    if not cleared:
        error = "; ".join(e for e in (error, f"cache not cleared: {clear_detail}") if e)
    return {
        **row,
        "prompt_tokens": result.prompt_tokens,
        "ttft_s": result.ttft_s,
        "e2e_s": result.e2e_s,
        "answer": excerpt(result.content, ANSWER_CHARS),
        "passed": result.ok and find_code(result.content, code),
        "status": _status(result),
        "error": error,
        "cache_cleared": cleared,
        "stream_defect": judge_stream(result) if result.ok else None,
    }


def template_tokens_for(
    client: httpx.Client, ctx: EngineContext, count: Callable[[str], int] | None, prompt_style: str = "chat"
) -> int:
    """The chat template's tokens, measured where the engine can tokenize, else from the config;
    0 for completion prompts, which have no template."""
    if prompt_style != "chat":
        return 0
    ep = ctx.endpoint
    measured = measure_template_tokens(client, ep.base_url, ep.model, count)
    return ctx.config.model.template_overhead_tokens if measured is None else measured


def run_long_context(ctx: EngineContext) -> list[dict]:
    """Every needle trial of the run config; writes and returns the `needles` rows."""
    spec = ctx.config.scenarios.long_context
    trials = plan_trials(needle_lengths(ctx), list(spec.depths))
    ep = ctx.endpoint
    rows: list[dict] = []
    with (
        ep.http_client() as client,
        ctx.run_dir.rows("needles", ep.engine, SCENARIO) as out,
    ):
        count = tokenize_counter(client, ep.base_url, ep.adapter)
        template_tokens = template_tokens_for(client, ctx, count, spec.prompt_style)
        for trial in trials:
            row = needle_request(
                client, ctx, SCENARIO, trial, spec.output_tokens, spec.prompt_style, count, template_tokens
            )
            out.write(row)
            rows.append(row)
    return rows
