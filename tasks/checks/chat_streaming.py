"""A streamed chat completion ends with [DONE] and its deltas reassemble into content.

How the output is spread over the events is judged by `output_streams`, not here.
"""

from __future__ import annotations

from tasks.checks.base import FAIL, PASS, CheckResult, Probe, empty_content_reason, evidence, request_failed

NAME = "chat_streaming"
PROMPT = "Name three colours of the rainbow."


def run(probe: Probe) -> CheckResult:
    s = probe.chat_stream(PROMPT)
    field = "choices[0].delta.content"
    if not s.ok:
        return request_failed(NAME, s, field)
    extra = {"events": s.events, "output_events": len(s.output_events), "finish_reason": s.finish_reason}
    if not s.content.strip():
        reason = empty_content_reason(probe, "the deltas carried no content", s.reasoning, s.reasoning_fields)
        return CheckResult(NAME, FAIL, evidence(s.status, field, s.content, reason, **extra))
    return CheckResult(NAME, PASS, evidence(s.status, field, s.content, "content streamed and [DONE] received", **extra))
