"""Output really streams: text arrives over several events as it is generated.

A role-only or empty first event is normal (OpenAI's own API sends one). A stream fails when its
text never appears in the deltas, or when it arrives only in the last event (all of it, or more
than half of a multi-token output). The quirk may hit only some streams (the seed saw "some
requests" without a visible first chunk), so several streams are sent and every one must pass.
"""

from __future__ import annotations

from typing import Any

from tasks.checks.base import CHAT_PATH, FAIL, PASS, CheckResult, Probe, evidence, request_failed
from tasks.evidence.stream import StreamResult

NAME = "output_streams"
STREAMS = 4
OUTPUT_TOKENS = 32
# Below this many tokens one long word can outweigh the rest: only the one-event rule applies.
MIN_TOKENS_FOR_SHARE_RULE = 4
PROMPT = "Count from one to forty in words, separated by commas."


def judge_stream(s: StreamResult) -> str | None:
    """Why this stream does not really stream, or None when it does."""
    text = s.content + s.reasoning
    if not s.output_events:
        return "no delta carried any text"
    tokens = s.completion_tokens
    size = tokens if tokens is not None else len(text.split())  # words stand in when usage is missing
    if len(s.output_events) == 1 and size > 1:
        return f"all output came in one event ({tokens if tokens is not None else 'unknown'} tokens)"
    last = s.output_events[-1]
    last_chars = len(last.content) + len(last.reasoning)
    if size >= MIN_TOKENS_FOR_SHARE_RULE and last_chars * 2 > len(text):
        return f"the last event carried {last_chars} of {len(text)} characters"
    return None


def _summary(s: StreamResult) -> dict[str, Any]:
    return {
        "request_id": s.request_id,
        "events": s.events,
        "output_events": len(s.output_events),
        "completion_tokens": s.completion_tokens,
        "first_event_s": s.first_event_s,
        "ttft_s": s.ttft_s,
        "e2e_s": s.e2e_s,
        "first_output_excerpt": s.output_events[0].content[:40] if s.output_events else "",
    }


def run(probe: Probe) -> CheckResult:
    payload = {
        "messages": [{"role": "user", "content": PROMPT}],
        "stream_options": {"include_usage": True},
        **probe.endpoint.adapter.exact_output_fields(OUTPUT_TOKENS),
    }
    streams = []
    for i in range(STREAMS):
        s = probe.stream(CHAT_PATH, payload)
        if not s.ok:
            return request_failed(NAME, s, f"stream {i + 1}: choices[0].delta")
        streams.append(s)
    summaries = [_summary(s) for s in streams]
    for i, s in enumerate(streams):
        why = judge_stream(s)
        if why:
            return CheckResult(NAME, FAIL, evidence(s.status, "choices[0].delta", s.content,
                                                    f"stream {i + 1} of {STREAMS}: {why}", streams=summaries))
    return CheckResult(NAME, PASS, evidence(200, "choices[0].delta", streams[0].content,
                                            f"all {STREAMS} streams delivered text over several events",
                                            streams=summaries))
