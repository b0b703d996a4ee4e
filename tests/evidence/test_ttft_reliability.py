"""PROTOCOL.md section 5: when TTFT may be published."""

from __future__ import annotations

import json

from tasks.stats.reliability import ttft_verdict


def row(check: str, outcome: str, reason: str = "") -> dict:
    return {"check": check, "outcome": outcome, "evidence": {"reason": reason}}


def test_streaming_shown_and_echo_honoured_is_reliable():
    v = ttft_verdict([row("output_streams", "pass"), row("completions_echo_false", "pass")])
    assert v == {"reliable": True, "reason": v["reason"]} and v["reason"]


def test_output_not_streamed_is_unreliable_with_the_evidence():
    v = ttft_verdict([row("output_streams", "fail", "stream 2 of 4: all output came in one event"),
                      row("completions_echo_false", "pass")])
    assert v["reliable"] is False and "one event" in v["reason"] and "E2E only" in v["reason"]


def test_echo_ignored_is_unreliable():
    v = ttft_verdict([row("output_streams", "pass"), row("completions_echo_false", "fail", "prompt came back")])
    assert v["reliable"] is False and "echo=false" in v["reason"]


def test_streaming_never_shown_is_unreliable_but_no_completions_api_is_fine():
    assert ttft_verdict([row("completions_echo_false", "pass")])["reliable"] is False
    assert ttft_verdict([row("output_streams", "not_applicable")])["reliable"] is False
    assert ttft_verdict([row("output_streams", "pass"), row("completions_echo_false", "not_applicable")])["reliable"]


def test_evidence_as_json_text_from_a_table_is_read():
    rows = [{"check": "output_streams", "outcome": "fail", "evidence": json.dumps({"reason": "no delta carried any text"})}]
    assert "no delta" in ttft_verdict(rows)["reason"]


def test_measured_requests_delivered_in_one_event_make_it_unreliable():
    checks = [row("output_streams", "pass")]
    good = {"request_id": "a", "status": "ok", "completion_tokens": 64, "tokens_per_event": [1] * 64}
    bad = {"request_id": "b", "status": "ok", "completion_tokens": 64, "tokens_per_event": [64]}
    assert ttft_verdict(checks, [good])["reliable"] is True
    v = ttft_verdict(checks, [good, bad])
    assert v["reliable"] is False and "b" in v["reason"]
