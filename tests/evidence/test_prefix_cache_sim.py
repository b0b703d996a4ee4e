"""The prefix-cache trial against the simulator: client TTFT and server counters must agree."""

from __future__ import annotations

from tasks.evidence.cache import run_prefix_cache

# A slow prefill (2,000 tokens: 0.2 s cold, 0.02 s hot) keeps the TTFT fall far from the 30% line
# on a busy machine.
SLOW_PREFILL = {"prefill_tokens_per_s": 10_000}


def test_clean_profile_cache_is_effective_with_both_kinds_of_evidence(sim_ctx):
    with sim_ctx("sglang", SLOW_PREFILL) as (sim, ctx):
        verdict = run_prefix_cache(ctx)
        truth = [r for r in sim.requests() if r["prompt_tokens"] >= 1000]
        trials = ctx.run_dir.read_rows("cache_trials", ctx.endpoint.engine)
        scrapes = ctx.run_dir.read_rows("server_metrics", ctx.endpoint.engine)
    assert verdict["verdict"] == "effective", verdict
    assert verdict["hit_rate"] >= 0.5 and verdict["ttft_decrease"] >= 0.3
    assert ctx.run_dir.read_json("verdicts/sim-sglang/prefix_cache.json") == verdict
    assert [t["trial"] for t in trials] == [0, 1, 2, 3, 4, 5]
    assert all(t["prompt_tokens"] == 2000 for t in trials)  # the configured prompt length, exactly
    assert trials[0]["cache_cleared"] is True and trials[0]["server_hits_delta"] == 0
    # per-trial counter deltas equal the server's own ground truth for each request
    assert [t["server_queries_delta"] for t in trials] == [float(r["prompt_tokens"]) for r in truth]
    assert [t["server_hits_delta"] for t in trials] == [float(r["cached_tokens"]) for r in truth]
    # whole-trial hit rate: counter deltas before the cold request to after the last repeat
    assert verdict["hit_rate"] == sum(r["cached_tokens"] for r in truth) / sum(r["prompt_tokens"] for r in truth)
    phases = {s["phase"] for s in scrapes}
    assert phases == {f"{w}_trial_{i}" for w in ("before", "after") for i in range(6)}
    assert {"sglang:prompt_tokens_total", "sglang:cached_tokens_total"} <= {s["metric"] for s in scrapes}


def test_counters_absent_leave_the_verdict_unconfirmed_naming_them(sim_ctx):
    with sim_ctx("sglang", {**SLOW_PREFILL, "quirks": {"metrics": "absent"}}) as (_, ctx):
        verdict = run_prefix_cache(ctx)
    assert verdict["verdict"] == "unconfirmed"
    assert verdict["hit_rate"] is None and verdict["ttft_decrease"] >= 0.3  # the client side still saw it
    assert "sglang:prompt_tokens_total" in verdict["reason"] and "not exposed" in verdict["reason"]


def test_renamed_counters_leave_the_verdict_unconfirmed(sim_ctx):
    with sim_ctx("vllm", {**SLOW_PREFILL, "dev_mode": True, "quirks": {"metrics": "renamed"}}) as (_, ctx):
        verdict = run_prefix_cache(ctx)
    assert verdict["verdict"] == "unconfirmed" and "vllm:prefix_cache_" in verdict["reason"]


def test_no_prefix_cache_is_unconfirmed_on_both_counts(sim_ctx):
    with sim_ctx("vllm", {**SLOW_PREFILL, "dev_mode": True, "prefix_cache": False}) as (_, ctx):
        verdict = run_prefix_cache(ctx)
    assert verdict["verdict"] == "unconfirmed"
    assert verdict["hit_rate"] == 0.0 and verdict["ttft_decrease"] < 0.3
    assert "hit rate" in verdict["reason"] and "TTFT median" in verdict["reason"]


def test_vllm_without_dev_mode_cannot_clear_and_says_so(sim_ctx):
    with sim_ctx("vllm", {"dev_mode": False}) as (_, ctx):
        verdict = run_prefix_cache(ctx)
        trials = ctx.run_dir.read_rows("cache_trials", ctx.endpoint.engine)
    assert verdict["cache_cleared"] is False and trials[0]["cache_cleared"] is False
    assert "/reset_prefix_cache -> 404" in verdict["reason"]
