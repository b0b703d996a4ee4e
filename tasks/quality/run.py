"""The quality step's requests: every item of the run's task set through the engine's chat endpoint, at
greedy decoding, as the functional checks send theirs; one `quality` row per item."""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from tasks.checks.base import CHAT_PATH, Probe, first_message
from tasks.engines.context import EngineContext
from tasks.state.documents import EVAL_SET
from tasks.load.prompts import CalibrationError, tokenize_counter
from tasks.quality.items import ESTIMATED_TOKENS_PER_LINE, Item, generate, table_line
from tasks.quality.score import is_correct

SCENARIO = "quality"
_CHARS_PER_TOKEN = 4  # the estimate where the engine cannot count
log = logging.getLogger("dayone.quality")
_TAIL_CHARS = 240


SAMPLE_LINES = 32  # table lines counted by the engine's tokenizer to size its kv_retrieval tables


def tokens_per_line(count: Callable[[str], int] | None, seed: int) -> float:
    """A kv_retrieval table line's length in the engine's tokens (its tokenize endpoint, over a seeded sample of
    lines, the same on every engine), or the stated estimate where the dialect has no such endpoint."""
    if count is None:
        return ESTIMATED_TOKENS_PER_LINE
    rng = random.Random(f"{seed}:kv_retrieval:sizing")
    sample = "\n".join(table_line(rng) for _ in range(SAMPLE_LINES))
    return count(sample) / SAMPLE_LINES


def items_of(ctx: EngineContext, count: Callable[[str], int] | None = None) -> list[Item]:
    """The seed's generated items, then the user's eval set as the plan kept it. kv_retrieval tables are sized
    with the engine's tokenizer (`count`), and an item whose prompt and answer budget would not fit the model's
    context is left out on every engine alike, said in the log: a table longer than the context fails on any
    engine, which tells nothing of the engine."""
    from tasks.quality.eval_set import items_from_json

    q = ctx.config.scenarios.quality
    own = ctx.run_dir.read_json(EVAL_SET) if q.eval_set else None
    try:
        per_line = tokens_per_line(count, q.seed)
    except CalibrationError as exc:
        log.warning("quality: kv_retrieval tables sized at the estimate of %.2f tokens a line: %s",
                    ESTIMATED_TOKENS_PER_LINE, exc)
        per_line, count = ESTIMATED_TOKENS_PER_LINE, None
    items = generate(q.seed, q.items_per_family, q.kv_context_tokens, per_line) + items_from_json(own or [])
    room = ctx.config.model.context_limit_tokens - q.max_tokens
    kept, left = [], {}
    for item in items:
        if item.family == "kv_retrieval":
            text = item.messages[-1]["content"]
            tokens = count(text) if count is not None else int(len(text) / _CHARS_PER_TOKEN)
            if tokens > room:
                left[item.context_tokens] = tokens
                continue
        kept.append(item)
    for length, tokens in sorted(left.items()):
        log.warning("quality: kv_retrieval at %d tokens left out: its prompt is %d tokens and the answer may take "
                    "%d, past the model's context of %d (model.context_limit_tokens)", length, tokens, q.max_tokens,
                    ctx.config.model.context_limit_tokens)
    return kept


def prompt_sha256(item: Item) -> str:
    """The digest of what was sent (messages and tools): two engines' rows of one item name the same prompt."""
    return hashlib.sha256(json.dumps([item.messages, item.tools], sort_keys=True).encode()).hexdigest()


def answer_of(item: Item, message: dict[str, Any]) -> tuple[str, bool]:
    """The answer text (the content, or the first tool call's arguments) and whether it is right."""
    if item.match != "tool_args":
        content = message.get("content") or ""
        return content, is_correct(item, content)
    calls = message.get("tool_calls") or []
    fn = (calls[0].get("function") or {}) if calls else {}
    arguments = fn.get("arguments")
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    wanted = item.tools[0]["function"]["name"]
    return (text if calls else ""), bool(calls) and fn.get("name") == wanted and is_correct(item, text)


def ask(probe: Probe, item: Item, max_tokens: int) -> dict[str, Any]:
    """One item's row fields: the answer, its verdict, the request's status and latency."""
    payload: dict[str, Any] = {"messages": item.messages, "max_tokens": max_tokens}
    if item.tools:
        payload.update(tools=item.tools, tool_choice="auto")
    started = time.monotonic()
    r = probe.post(CHAT_PATH, payload)
    latency_s = round(time.monotonic() - started, 6)
    message = first_message(r.body) if r.ok else None
    if message is None:
        error = r.error if not r.ok else "no choices[0].message in the response"
        return {"answer": None, "correct": False, "status": "error", "error": error, "latency_s": latency_s}
    answer, correct = answer_of(item, message)
    return {"answer": answer, "correct": correct, "status": "ok", "error": None, "latency_s": latency_s}


def run_quality(ctx: EngineContext) -> list[dict[str, Any]]:
    """Send every item to the engine, and an item answered wrong once more (`reask_wrong`); write and return the
    `quality` rows."""
    ep = ctx.endpoint
    max_tokens, reask = ctx.config.scenarios.quality.max_tokens, ctx.config.scenarios.quality.reask_wrong
    rows: list[dict[str, Any]] = []
    with ep.http_client() as client, ctx.run_dir.rows("quality", ep.engine, SCENARIO) as out:
        probe = Probe(ep, client, ctx.config.model.reasoning)
        for item in items_of(ctx, tokenize_counter(client, ep.base_url, ep.adapter)):
            last = item.messages[-1]["content"]
            row = {**ep.row_keys(SCENARIO), "family": item.family, "item_id": item.id,
                   "context_tokens": item.context_tokens, "match_rule": item.match,
                   "prompt_sha256": prompt_sha256(item), "prompt_tail": last[-_TAIL_CHARS:],
                   "expected": json.dumps(item.expected, sort_keys=True), **ask(probe, item, max_tokens),
                   "reask_answer": None, "reask_correct": None}
            if not row["correct"] and reask:  # confirm a wrong answer before it can count as a change
                again = ask(probe, item, max_tokens)
                row.update(reask_answer=again["answer"], reask_correct=again["correct"])
            out.write(row)
            rows.append(row)
    return rows
