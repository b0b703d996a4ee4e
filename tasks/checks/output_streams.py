"""Output really streams: text arrives over several events as it is generated.

Judged on both APIs the run times: chat streams, and completions streams of exactly the shape the
benchmarks send (a token-ID prompt, the output length forced), since a server may stream one and
not the other. A role-only or empty first event is normal (OpenAI's own API sends one). A stream
fails by the one rule of tasks/stats/reliability.py: no text in any event, all of a multi-token
output in one event, or more than half of it in the last event. The quirk may hit only some
streams (the GLM-5.3-Flash Day 1 Hands-on report saw "some requests" without a visible first
chunk), so several streams are sent on each API and every one must pass.
"""

from __future__ import annotations

from typing import Any

from tasks.checks.base import CHAT_PATH, COMPLETIONS_PATH, FAIL, PASS, CheckResult, Probe, evidence, request_failed
from tasks.stats.reliability import judge_stream
from tasks.engines.stream import StreamResult
from tasks.load.plan import completion_body, random_token_ids

NAME = "output_streams"
STREAMS = 4  # per API
OUTPUT_TOKENS = 32
COMPLETIONS_PROMPT_TOKENS = 32
PROMPT = "Count from one to forty in words, separated by commas."


def _summary(api: str, s: StreamResult) -> dict[str, Any]:
    return {
        "api": api,
        "request_id": s.request_id,
        "events": s.events,
        "output_events": len(s.output_events),
        "completion_tokens": s.completion_tokens,
        "first_event_s": s.first_event_s,
        "ttft_s": s.ttft_s,
        "e2e_s": s.e2e_s,
        "first_output_excerpt": s.output_events[0].content[:40] if s.output_events else "",
    }


def _payloads(probe: Probe) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(api, path, field, body) of each API's streams; the completions body is the benchmarks'."""
    adapter = probe.endpoint.adapter
    chat = {
        "messages": [{"role": "user", "content": PROMPT}],
        "stream_options": {"include_usage": True},
        **adapter.exact_output_fields(OUTPUT_TOKENS),
    }
    measured = completion_body(probe.endpoint.model, random_token_ids(COMPLETIONS_PROMPT_TOKENS, NAME),
                               OUTPUT_TOKENS, adapter)
    return [("chat", CHAT_PATH, "choices[0].delta", chat), ("completions", COMPLETIONS_PATH, "choices[0].text", measured)]


def run(probe: Probe) -> CheckResult:
    summaries, first = [], None
    payloads = _payloads(probe)
    total = STREAMS * len(payloads)
    for api, path, field_seen, payload in payloads:
        for i in range(STREAMS):
            s = probe.stream(path, payload)
            if not s.ok:
                return request_failed(NAME, s, f"{api} API stream {i + 1}: {field_seen}")
            summaries.append(_summary(api, s))
            first = first or s
            why = judge_stream(s)
            if why:
                return CheckResult(NAME, FAIL, evidence(s.status, field_seen, s.content,
                                                        f"stream {len(summaries)} of {total} ({api} API): {why}",
                                                        streams=summaries))
    assert first is not None
    return CheckResult(NAME, PASS, evidence(200, "choices[0].delta and choices[0].text", first.content,
                                            f"all {STREAMS} chat and {STREAMS} completions streams delivered "
                                            "text over several events", streams=summaries))
