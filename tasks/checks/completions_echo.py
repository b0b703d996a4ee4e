"""Completions `echo`: with echo=false the prompt must not come back; with echo=true it must.

An engine that ignores echo=false changes what a completions TTFT times (PROTOCOL.md section 5).
One that ignores echo=true (llama.cpp) breaks clients that score or display the prompt; both are
the same quirk -- the parameter is ignored -- seen from its two sides, so they are two checks.
A server with no completions API (404) makes the checks not_applicable.
"""

from __future__ import annotations

from tasks.checks.base import COMPLETIONS_PATH, FAIL, NOT_APPLICABLE, PASS, CheckResult, Probe, evidence, request_failed

NAME = "completions_echo_false"
ECHO_TRUE_NAME = "completions_echo_true"
MARKER = "DayOne echo probe Q7VZ"
PROMPT = f"{MARKER}: the lighthouse keeper counted the ships and wrote"


def run(probe: Probe) -> CheckResult:
    return _run(probe, echo=False)


def _run(probe: Probe, echo: bool) -> CheckResult:
    name = NAME if not echo else ECHO_TRUE_NAME
    r = probe.post(COMPLETIONS_PATH, {"prompt": PROMPT, "echo": echo, "max_tokens": 16})
    field = "choices[0].text"
    if r.status == 404:
        return CheckResult(name, NOT_APPLICABLE, evidence(r.status, field, r.body_excerpt, "no completions API"))
    if not r.ok:
        return request_failed(name, r, field)
    try:
        text = r.body["choices"][0]["text"] or ""
    except (KeyError, IndexError, TypeError):
        return CheckResult(name, FAIL, evidence(r.status, field, r.body_excerpt, "no choices[0].text"))
    if echo:
        if text.startswith(PROMPT):
            return CheckResult(name, PASS, evidence(r.status, field, text, "echo=true returned the prompt"))
        return CheckResult(name, FAIL, evidence(r.status, field, text, "echo=true ignored: the prompt did not come back"))
    if MARKER in text:
        return CheckResult(name, FAIL, evidence(r.status, field, text, "echo=false ignored: the prompt came back"))
    return CheckResult(name, PASS, evidence(r.status, field, text, "the prompt did not come back"))


class EchoTrue:
    """The echo=true side, registered as its own check."""

    NAME = ECHO_TRUE_NAME

    @staticmethod
    def run(probe: Probe) -> CheckResult:
        return _run(probe, echo=True)
