"""A streamed tool call: fragments reassemble into the right name and schema-valid arguments."""

from __future__ import annotations

from tasks.checks.base import CheckResult, Probe, request_failed
from tasks.checks.tool_call import PROMPT, REQUEST, judge_tool_calls

NAME = "tool_call_streaming"


def run(probe: Probe) -> CheckResult:
    s = probe.chat_stream(PROMPT, **REQUEST)
    if not s.ok:
        return request_failed(NAME, s, "choices[0].delta.tool_calls")
    return judge_tool_calls(NAME, s.status, s.tool_calls, fragments=s.tool_fragments, finish_reason=s.finish_reason)
