"""A stream asked for usage (stream_options.include_usage) carries it in its last event.

Without it, output token counts must come from elsewhere and TPOT cannot be computed honestly.
"""

from __future__ import annotations

from tasks.checks.base import FAIL, PASS, CheckResult, Probe, evidence, request_failed

NAME = "streaming_usage"
PROMPT = "Name three colours of the rainbow."


def run(probe: Probe) -> CheckResult:
    s = probe.chat_stream(PROMPT, stream_options={"include_usage": True})
    field = "usage"
    if not s.ok:
        return request_failed(NAME, s, field)
    usage = s.usage or {}
    if not isinstance(usage.get("completion_tokens"), int) or not isinstance(usage.get("prompt_tokens"), int):
        return CheckResult(NAME, FAIL, evidence(s.status, field, s.usage, "no usage with token counts in the stream"))
    return CheckResult(NAME, PASS, evidence(s.status, field, usage, "usage present"))
