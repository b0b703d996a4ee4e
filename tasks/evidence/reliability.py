"""May an engine's TTFT be published? (PROTOCOL.md section 5)

TTFT is unreliable when the engine's streams do not deliver output as it is generated (text
missing from the deltas, or arriving only in the last event) or when the API ignored a parameter
that changes what is timed (echo=false). Then the report publishes E2E only, with the reason.

Decision rule, from the functional checks (and, when given, the measured requests):
- `output_streams` must have passed: TTFT is only meaningful for a stream shown to stream, so a
  failed, skipped or missing check makes TTFT unreliable.
- `completions_echo_false` failing makes it unreliable; not applicable (skipped, or no
  completions API) does not, since nothing was shown to be ignored.
- Any measured streamed request whose whole output came in one event although it had more than
  one output token makes it unreliable (the quirk can hit only some streams).
"""

from __future__ import annotations

import json
from typing import Any

STREAMING_CHECK = "output_streams"
ECHO_CHECK = "completions_echo_false"


def _evidence_text(row: dict[str, Any]) -> str:
    evidence = row.get("evidence")
    if isinstance(evidence, str):
        try:
            evidence = json.loads(evidence)
        except ValueError:
            return evidence[:200]
    if isinstance(evidence, dict):
        return str(evidence.get("reason") or evidence.get("excerpt") or "")[:200]
    return ""


def unstreamed_requests(requests_rows: list[dict[str, Any]]) -> list[str]:
    """Request ids whose whole output arrived in a single event despite several output tokens."""
    out = []
    for r in requests_rows:
        per_event = r.get("tokens_per_event")
        if isinstance(per_event, str):
            per_event = json.loads(per_event)
        tokens = r.get("completion_tokens")
        if r.get("status") == "ok" and per_event is not None and len(per_event) == 1 and (tokens or 0) > 1:
            out.append(str(r.get("request_id")))
    return out


def ttft_verdict(checks_rows: list[dict[str, Any]], requests_rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """{reliable: bool, reason: str} for one engine, from its `checks` rows (and `requests` rows)."""
    by_check = {r.get("check"): r for r in checks_rows}
    reasons: list[str] = []
    streams = by_check.get(STREAMING_CHECK)
    if streams is None:
        reasons.append(f"the {STREAMING_CHECK} check did not run, so streaming was never shown")
    elif streams.get("outcome") != "pass":
        detail = _evidence_text(streams)
        reasons.append(
            f"output does not really stream ({STREAMING_CHECK}: {streams.get('outcome')}"
            + (f": {detail}" if detail else "")
            + ")"
        )
    echo = by_check.get(ECHO_CHECK)
    if echo is not None and echo.get("outcome") == "fail":
        detail = _evidence_text(echo)
        reasons.append("the completions API ignored echo=false" + (f" ({detail})" if detail else ""))
    if requests_rows:
        unstreamed = unstreamed_requests(requests_rows)
        if unstreamed:
            reasons.append(
                f"{len(unstreamed)} measured stream(s) delivered all output in one event "
                f"(e.g. {', '.join(unstreamed[:3])})"
            )
    if reasons:
        return {"reliable": False, "reason": "TTFT not published, E2E only: " + "; ".join(reasons)}
    return {"reliable": True, "reason": "output streams as generated and echo=false is honoured"}
