"""Long-context needles against the simulator: exact lengths, cold requests, exact answers."""

from __future__ import annotations

import pytest

from tasks.evidence.needles import LengthOverLimit, run_long_context

DEPTHS = [0.1, 0.5, 0.9]


def test_clean_profile_every_needle_passes_at_exact_lengths(sim_ctx):
    with sim_ctx("sglang") as (sim, ctx):
        rows = run_long_context(ctx)
        truth = [r for r in sim.requests() if (r.get("prompt_tokens") or 0) >= 1000]
        written = ctx.run_dir.read_rows("needles", ctx.endpoint.engine)
    limit = ctx.config.usable_context_tokens(128)  # 4096 - 128 - 64
    # lengths 1000 (twice), 2000, and the model limit minus output and template
    assert [(r["target_tokens"], r["attempt"]) for r in rows] == (
        [(1000, 1)] * 3 + [(1000, 2)] * 3 + [(2000, 1)] * 3 + [(limit, 1)] * 3
    )
    assert [r["depth"] for r in rows] == DEPTHS * 4
    assert [r["first_encounter"] for r in rows] == [True] * 3 + [False] * 9
    assert all(r["passed"] and r["answer"] == r["expected"] for r in rows), rows
    assert all(r["prompt_tokens"] == r["target_tokens"] for r in rows)  # usage agrees with the target
    assert all(r["cache_cleared"] for r in rows)
    # cleared before every request: the server's ground truth shows no cache hit on any needle
    assert len(truth) == len(rows) and all(t["cached_tokens"] == 0 for t in truth), truth[:2]
    assert len(written) == len(rows) and {r["scenario"] for r in written} == {"long_context"}


def test_wrong_answers_past_a_depth_fail_exactly_those_needles(sim_ctx):
    with sim_ctx("vllm", {"dev_mode": True, "needle_max_depth": 0.6}) as (_, ctx):
        rows = run_long_context(ctx)
    for r in rows:
        assert r["passed"] is (r["depth"] < 0.6), r
        assert r["status"] == "ok"  # a 200 is not a pass
        if not r["passed"]:
            assert r["answer"] and r["answer"] != r["expected"]


def test_wrong_answers_past_a_length_fail_exactly_those_needles(sim_ctx):
    with sim_ctx("sglang", {"needle_max_tokens": 1500}) as (_, ctx):
        rows = run_long_context(ctx)
    assert {r["target_tokens"] for r in rows if not r["passed"]} == {2000, ctx.config.usable_context_tokens(128)}
    assert all(r["passed"] for r in rows if r["target_tokens"] == 1000)


def test_completion_prompt_style_sends_text_prompts(sim_ctx):
    scenarios = {"long_context": {"lengths": [1200], "include_model_limit": False, "prompt_style": "completion"}}
    with sim_ctx("sglang", scenarios=scenarios) as (_, ctx):
        rows = run_long_context(ctx)
    assert len(rows) == 6 and all(r["passed"] and r["prompt_tokens"] == 1200 for r in rows)


def test_a_length_over_the_model_limit_is_refused_before_anything_is_sent(sim_ctx):
    with sim_ctx("sglang") as (sim, ctx):
        wider = ctx.config.model_copy(update={"model": ctx.config.model.model_copy(update={"context_limit_tokens": 2048})})
        narrow = type(ctx)(wider, ctx.endpoint, ctx.run_dir)
        with pytest.raises(LengthOverLimit, match=r"scenarios\.long_context\.lengths\[1\].*2000"):
            run_long_context(narrow)
        assert sim.requests() == []


def test_a_failed_request_is_a_row_with_its_error(sim_ctx):
    with sim_ctx("sglang") as (sim, ctx):
        sim.stop()
        rows = run_long_context(ctx)
    assert len(rows) == 12 and not any(r["passed"] for r in rows)
    assert all(r["status"] == "error" and r["error"] for r in rows)
