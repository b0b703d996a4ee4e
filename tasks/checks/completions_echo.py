"""Completions with echo=false: the prompt must not come back in the text.

An engine that ignores echo=false changes what a completions TTFT times (PROTOCOL.md section 5).
A server with no completions API (404) makes the check not_applicable.
"""

from __future__ import annotations

from tasks.checks.base import COMPLETIONS_PATH, FAIL, NOT_APPLICABLE, PASS, CheckResult, Probe, evidence, request_failed

NAME = "completions_echo_false"
MARKER = "DayOne echo probe Q7VZ"
PROMPT = f"{MARKER}: the lighthouse keeper counted the ships and wrote"


def run(probe: Probe) -> CheckResult:
    r = probe.post(COMPLETIONS_PATH, {"prompt": PROMPT, "echo": False, "max_tokens": 16})
    field = "choices[0].text"
    if r.status == 404:
        return CheckResult(NAME, NOT_APPLICABLE, evidence(r.status, field, r.body_excerpt, "no completions API"))
    if not r.ok:
        return request_failed(NAME, r, field)
    try:
        text = r.body["choices"][0]["text"] or ""
    except (KeyError, IndexError, TypeError):
        return CheckResult(NAME, FAIL, evidence(r.status, field, r.body_excerpt, "no choices[0].text"))
    if MARKER in text:
        return CheckResult(NAME, FAIL, evidence(r.status, field, text, "echo=false ignored: the prompt came back"))
    return CheckResult(NAME, PASS, evidence(r.status, field, text, "the prompt did not come back"))
