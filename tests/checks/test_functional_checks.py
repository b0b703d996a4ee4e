"""PROTOCOL.md section 4: every functional check against the simulator, clean and with each quirk.

A quirk must flip exactly its own check to fail, with the evidence, and leave every other check
as it was on the clean profile.
"""

from __future__ import annotations

import json

import pytest

from tasks.checks import CHECK_NAMES, run_functional
from tasks.stats.reliability import ttft_verdict

CLEAN = {"reasoning": True}


def outcomes(rows: list[dict]) -> dict[str, str]:
    return {r["check"]: r["outcome"] for r in rows}


@pytest.mark.parametrize("dialect", ["sglang", "vllm"])
def test_clean_profile_passes_every_check(sim_ctx, dialect):
    with sim_ctx(dialect, CLEAN) as (_, ctx):
        rows = run_functional(ctx)
        written = ctx.run_dir.read_rows("checks", ctx.endpoint.engine)
    assert [r["check"] for r in rows] == list(CHECK_NAMES)
    assert outcomes(rows) == {name: "pass" for name in CHECK_NAMES}, [r["evidence"] for r in rows]
    assert written == json.loads(json.dumps(rows))  # the partition holds exactly the returned rows
    for r in rows:
        assert r["scenario"] == "functional" and r["run_id"] == "test-run"
        assert {"status", "field", "excerpt", "reason"} <= set(r["evidence"])
    assert ttft_verdict(rows)["reliable"] is True


# (quirk, profile, the check that must fail, reason part, excerpt part, TTFT still publishable?)
QUIRKS = [
    ("reasoning_inline", {"quirks": {"reasoning_inline": True}}, "reasoning_split", "inline", "<think>", True),
    ("echo_ignored", {"quirks": {"echo_ignored": True}}, "completions_echo_false", "echo=false ignored",
     "DayOne echo probe", False),
    ("unstreamed", {"quirks": {"unstreamed_every_nth": 2}}, "output_streams", "one event", "", False),
    ("usage_missing", {"quirks": {"usage_missing": True}}, "streaming_usage", "no usage", "None", True),
]


@pytest.mark.parametrize("quirk,profile,failing,reason_part,excerpt_part,ttft_reliable", QUIRKS,
                         ids=[q[0] for q in QUIRKS])
def test_each_quirk_fails_exactly_its_check_with_evidence(
    sim_ctx, quirk, profile, failing, reason_part, excerpt_part, ttft_reliable
):
    with sim_ctx("vllm", {**CLEAN, **profile}) as (sim, ctx):
        rows = run_functional(ctx)
        truth = sim.requests()
    # the simulator really applied the quirk (its ground truth says so)
    assert any(quirk in r["quirks"] for r in truth)
    expected = {c: "pass" for c in CHECK_NAMES}
    expected[failing] = "fail"
    assert outcomes(rows) == expected, [(r["check"], r["evidence"]["reason"]) for r in rows if r["outcome"] != "pass"]
    evidence = next(r["evidence"] for r in rows if r["check"] == failing)
    assert reason_part in evidence["reason"]
    assert excerpt_part in evidence["excerpt"]
    assert evidence["status"] == 200  # the request "worked": a 200 is not a pass
    # PROTOCOL section 5: streams that mislead or an ignored echo=false withdraw TTFT, E2E only
    verdict = ttft_verdict(rows)
    assert verdict["reliable"] is ttft_reliable, verdict
    if not ttft_reliable:
        assert failing in verdict["reason"] or "echo=false" in verdict["reason"]
        assert "E2E only" in verdict["reason"]
    if failing == "output_streams":  # the evidence names the streams; the server marked the same one
        flagged = {r["request_id"] for r in truth if "unstreamed" in r["quirks"]}
        index = int(evidence["reason"].split()[1]) - 1  # "stream 2 of 4: ..."
        assert evidence["streams"][index]["request_id"] in flagged


def test_counters_absent_change_no_functional_check(sim_ctx):
    with sim_ctx("sglang", {**CLEAN, "quirks": {"metrics": "absent"}}) as (_, ctx):
        rows = run_functional(ctx)
    assert outcomes(rows) == {name: "pass" for name in CHECK_NAMES}


def test_no_reasoning_at_all_is_not_applicable_with_the_reason(sim_ctx):
    with sim_ctx("sglang", {"reasoning": False}) as (_, ctx):
        rows = run_functional(ctx)
    got = outcomes(rows)
    assert got.pop("reasoning_split") == "not_applicable"
    assert set(got.values()) == {"pass"}
    reason = next(r["evidence"]["reason"] for r in rows if r["check"] == "reasoning_split")
    assert "no reasoning returned" in reason


def test_skipped_checks_are_not_applicable(sim_ctx):
    scenarios = {"functional": {"skip": ["image_input", "openai_sdk"]}}
    with sim_ctx("sglang", CLEAN, scenarios=scenarios) as (sim, ctx):
        before = len(sim.requests())
        rows = run_functional(ctx)
        got = outcomes(rows)
        assert got["image_input"] == got["openai_sdk"] == "not_applicable"
        assert {got[c] for c in CHECK_NAMES if c not in ("image_input", "openai_sdk")} == {"pass"}
        # nothing was sent for a skipped check: no image request reached the server
        sent = sim.requests()[before:]
        assert not any("image" in json.dumps(r) for r in sent)
    # unknown names are refused when the config is parsed: tests/test_config.py


def test_a_server_that_is_gone_fails_every_check_without_crashing(sim_ctx):
    with sim_ctx("sglang", CLEAN) as (sim, ctx):
        sim.stop()
        rows = run_functional(ctx)
    assert outcomes(rows) == {name: "fail" for name in CHECK_NAMES}
    assert all(r["evidence"]["reason"] for r in rows)
