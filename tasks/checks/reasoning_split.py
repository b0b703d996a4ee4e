"""Reasoning comes in its own field, streamed and not.

Both dialect fields are read through the adapter (`reasoning_content`, `reasoning`). Reasoning
left inline in the content (<think>...</think>) fails: a frontend would show the thinking as the
answer. When the server returns no reasoning at all, in any field or inline, the check is
not_applicable (the model does not reason, or its reasoning parser is off), unless the run config
says the model reasons (`model.reasoning: true`): then it fails. The evidence names the field that
carried the reasoning, streamed and not, so a frontend that reads only one field can be judged.
"""

from __future__ import annotations

import re

from tasks.checks.base import FAIL, NOT_APPLICABLE, PASS, CheckResult, Probe, evidence, first_message, request_failed

NAME = "reasoning_split"
PROMPT = "What is 17 + 25? Think it through step by step, then give the answer."
INLINE_REASONING = re.compile(r"</?(?:think|thinking|reasoning)>", re.IGNORECASE)


INLINE_FIELD = "content (inline <think>)"


def _carriers(fields: tuple[str, ...] | list[str], content: str) -> str | None:
    """Where the reasoning came: its dialect field(s), or inline in the content; None when nowhere."""
    if fields:
        return "+".join(fields)
    return INLINE_FIELD if INLINE_REASONING.search(content) else None


def run(probe: Probe) -> CheckResult:
    adapter = probe.endpoint.adapter
    fields = "|".join(adapter.reasoning_fields)
    r = probe.chat(PROMPT)
    if not r.ok:
        return request_failed(NAME, r, f"choices[0].message.({fields})")
    message = first_message(r.body)
    if message is None:
        return CheckResult(NAME, FAIL, evidence(r.status, "choices[0].message", r.body_excerpt, "no message"))
    s = probe.chat_stream(PROMPT)
    if not s.ok:
        return request_failed(NAME, s, f"choices[0].delta.({fields})")

    content, reasoning = message.get("content") or "", adapter.reasoning_text(message)
    extra = {
        "reasoning_field": _carriers(adapter.reasoning_fields_in(message), content),
        "streamed_reasoning_field": _carriers(s.reasoning_fields, s.content),
        "reasoning_excerpt": reasoning[:120],
        "streamed_reasoning_excerpt": s.reasoning[:120],
    }
    for where, text in (("choices[0].message.content", content), ("choices[0].delta.content", s.content)):
        if INLINE_REASONING.search(text):
            return CheckResult(NAME, FAIL, evidence(r.status, where, text, "reasoning left inline in the content", **extra))
    if not reasoning and not s.reasoning:
        if probe.model_reasons:
            return CheckResult(NAME, FAIL, evidence(
                r.status, f"choices[0].message.({fields})", content,
                "no reasoning returned in any field or inline, but the run config says the model reasons "
                "(model.reasoning: true): is the engine's reasoning parser on?", **extra))
        return CheckResult(NAME, NOT_APPLICABLE, evidence(
            r.status, f"choices[0].message.({fields})", content,
            "no reasoning returned in any field or inline: the model does not reason or its parser is off", **extra))
    if not reasoning or not s.reasoning:
        missing = "non-streamed message" if not reasoning else "streamed deltas"
        return CheckResult(NAME, FAIL, evidence(
            r.status, f"({fields})", content if not reasoning else s.content,
            f"reasoning split in one mode but missing from the {missing}", **extra))
    extra["content_excerpt"] = content[:120]  # may be empty when thinking used all the tokens
    return CheckResult(NAME, PASS, evidence(r.status, f"choices[0].message.{extra['reasoning_field']}", reasoning,
                                            "reasoning in its own field, streamed and not",
                                            **extra))
