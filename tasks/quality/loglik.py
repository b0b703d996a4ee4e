"""Log-likelihood parity: one fixed generated text, at several lengths, scored by each engine's prompt
log-probabilities; the mean NLL per token per length in the `loglik` table, and the engines that part
from the others (docs/PROTOCOL.md, "Log-likelihood parity")."""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterable
from statistics import median
from typing import Any

from tasks.engines.stream import post_json
from tasks.config import RunConfig
from tasks.engines.context import EngineContext

SCENARIO = "quality"
DEFAULT_LENGTHS_TOKENS = (256, 1024, 4096, 16384)
_CHARS_PER_TOKEN = 4  # as the kv tables count: about 4 characters of plain English make a token
_SUBJECTS = ("The river", "A small boat", "The old bridge", "Every morning the baker", "The north wind",
             "A quiet village", "The library", "Her brother", "The garden", "A long train")
_VERBS = ("carried", "watched", "followed", "remembered", "opened", "crossed", "painted", "counted")
_OBJECTS = ("the heavy stones", "a letter from the coast", "seven red apples", "the winter market",
            "an empty field", "the last lantern", "a map of the valley", "the sleeping dog")
_ENDINGS = ("before noon.", "while it rained.", "without a word.", "for the third time.", "as the bells rang.",
            "near the harbour.", "after supper.", "in the cold light.")


def fixed_text(seed: int, length_tokens: int) -> str:
    """The first ~`length_tokens` tokens of the seed's text: plain sentences, so a real model gives it a
    sensible NLL; a shorter length is a prefix of a longer one, so NLL by length reads as NLL by depth."""
    rng = random.Random(f"{seed}:loglik")
    chars = length_tokens * _CHARS_PER_TOKEN
    parts: list[str] = []
    size = 0
    while size < chars:
        sentence = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_ENDINGS)}"
        parts.append(sentence)
        size += len(sentence) + 1
    return " ".join(parts)[:chars].rstrip()


def lengths_of(cfg: RunConfig) -> list[int]:
    """The run's text lengths: the configured ones, else the defaults the model's context holds."""
    q = cfg.scenarios.quality
    if q.nll_lengths_tokens is not None:
        return list(q.nll_lengths_tokens)
    return [n for n in DEFAULT_LENGTHS_TOKENS if n <= cfg.usable_context_tokens(1)]


def score(ctx: EngineContext, client: Any, text: str) -> dict[str, Any]:
    """One length's row fields: the tokens scored and their mean NLL, or why not."""
    ep = ctx.endpoint
    adapter = ep.adapter
    if adapter.prompt_logprobs_path is None:
        return {"status": "not_applicable", "reason": adapter.prompt_logprobs_missing, "prompt_tokens": None,
                "mean_nll_nats": None, "latency_s": None}
    started = time.monotonic()
    r = post_json(client, ep.base_url.rstrip("/") + adapter.prompt_logprobs_path,
                  adapter.prompt_logprobs_body(text, ep.model))
    latency_s = round(time.monotonic() - started, 6)
    failed = {"status": "error", "prompt_tokens": None, "mean_nll_nats": None, "latency_s": latency_s}
    if not r.ok:
        return {**failed, "reason": r.error}
    try:
        logprobs = adapter.prompt_logprobs(r.body)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        return {**failed, "reason": f"no prompt log-probabilities in the response ({type(exc).__name__}: {exc})"}
    if not logprobs:
        return {**failed, "reason": "the response scored no prompt token"}
    return {"status": "ok", "reason": None, "prompt_tokens": len(logprobs) + 1,
            "mean_nll_nats": -sum(logprobs) / len(logprobs), "latency_s": latency_s}


def run_loglik(ctx: EngineContext) -> list[dict[str, Any]]:
    """Score the fixed text at each of the run's lengths; write and return the `loglik` rows."""
    q = ctx.config.scenarios.quality
    ep = ctx.endpoint
    rows: list[dict[str, Any]] = []
    with ep.http_client() as client, ctx.run_dir.rows("loglik", ep.engine, SCENARIO) as out:
        for length in lengths_of(ctx.config):
            text = fixed_text(q.seed, length)
            row = {**ep.row_keys(SCENARIO), "length_tokens": length,
                   "text_sha256": hashlib.sha256(text.encode()).hexdigest(), **score(ctx, client, text)}
            out.write(row)
            rows.append(row)
    return rows


def nll_findings(rows: Iterable[dict[str, Any]], tolerance: float) -> list[dict[str, Any]]:
    """Where one engine parts from the others (engines serving the same weights): a *gap*, its NLL above
    the median of the others' at a length by more than `tolerance`; a *depth* rise, its NLL's rise from
    the shortest length above the others' median rise by more than `tolerance`. With two engines the
    higher one is named: a numerical fault raises the NLL, it does not lower it."""
    nll: dict[str, dict[int, float]] = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("mean_nll_nats") is not None:
            nll.setdefault(r["engine"], {})[int(r["length_tokens"])] = float(r["mean_nll_nats"])
    found: list[dict[str, Any]] = []
    for engine, mine in nll.items():
        others = {e: v for e, v in nll.items() if e != engine}
        shortest = min(mine)
        for length, value in sorted(mine.items()):
            theirs = [v[length] for v in others.values() if length in v]
            if not theirs:
                continue
            gap = value - median(theirs)
            if gap > tolerance:
                found.append({"engine": engine, "length_tokens": length, "kind": "gap",
                              "text": f"{engine}'s NLL at {length:,} tokens is {value:.3f} nats/token, "
                                      f"{gap:+.3f} above the others' {median(theirs):.3f} (tolerance {tolerance:g})"})
            rises = [v[length] - v[shortest] for v in others.values() if length in v and shortest in v]
            if length == shortest or not rises:
                continue
            excess = (value - mine[shortest]) - median(rises)
            if excess > tolerance:
                found.append({"engine": engine, "length_tokens": length, "kind": "depth",
                              "text": f"{engine}'s NLL rises with depth: {value - mine[shortest]:+.3f} nats/token "
                                      f"from {shortest:,} to {length:,} tokens, the others' {median(rises):+.3f} "
                                      f"(tolerance {tolerance:g})"})
    return found
