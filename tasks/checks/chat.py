"""A plain chat completion returns non-empty content."""

from __future__ import annotations

from tasks.checks.base import (FAIL, PASS, CheckResult, Probe, empty_content_reason, evidence, first_message,
                               request_failed)

NAME = "chat"
PROMPT = "Name three colours of the rainbow."


def run(probe: Probe) -> CheckResult:
    r = probe.chat(PROMPT)
    field = "choices[0].message.content"
    if not r.ok:
        return request_failed(NAME, r, field)
    message = first_message(r.body)
    if message is None:
        return CheckResult(NAME, FAIL, evidence(r.status, "choices[0].message", r.body_excerpt, "no message"))
    content = message.get("content") or ""
    finish = r.body["choices"][0].get("finish_reason")
    if not content.strip():
        adapter = probe.endpoint.adapter
        reason = empty_content_reason(probe, "empty content", adapter.reasoning_text(message),
                                      adapter.reasoning_fields_in(message))
        return CheckResult(NAME, FAIL, evidence(r.status, field, content, reason, finish_reason=finish))
    return CheckResult(NAME, PASS, evidence(r.status, field, content, "content returned", finish_reason=finish))
