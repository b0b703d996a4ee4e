"""Counter resets and restarts with the simulator's profile options (restart_after_requests,
counter_base with counter_base_drop_after_requests): the window rule and the step watch."""

from __future__ import annotations

import httpx

from tasks.evidence.cache import run_prefix_cache
from tasks.evidence.restarts import watch_step

SLOW_PREFILL = {"prefill_tokens_per_s": 10_000}
# The trial's first request measures the chat template; then the cold request and the repeats.
AFTER_SECOND_REPEAT = 4


def test_a_restart_after_the_second_repeat_leaves_the_hit_rate_unpublished(sim_ctx):
    profile = {**SLOW_PREFILL, "dev_mode": True, "faults": {"restart_after_requests": AFTER_SECOND_REPEAT}}
    with sim_ctx("vllm", profile) as (sim, ctx):
        verdict = run_prefix_cache(ctx, sim.restart_count)
        restarts = sim.restart_count()
        trials = ctx.run_dir.read_rows("cache_trials", ctx.endpoint.engine)
    assert restarts == 1
    assert verdict["verdict"] == "unconfirmed" and verdict["hit_rate"] is None, verdict
    assert verdict["ttft_decrease"] >= 0.3  # the client side alone would have called it effective
    reason = verdict["hit_rate_unpublished"]
    assert "the engine's restart count went from 0 to 1 during the trial" in reason
    assert "process_start_time_seconds changed" in reason
    assert "vllm:prefix_cache_queries_total fell from" in reason
    assert all(t["server_queries_delta"] is None and t["deltas_unpublished"] == reason for t in trials)


def test_counters_falling_from_a_base_leave_the_hit_rate_unpublished_without_a_restart(sim_ctx):
    profile = {**SLOW_PREFILL, "counter_base": 1_000_000,
               "faults": {"counter_base_drop_after_requests": AFTER_SECOND_REPEAT}}
    with sim_ctx("sglang", profile) as (sim, ctx):
        verdict = run_prefix_cache(ctx, sim.restart_count)
        restarts = sim.restart_count()
    assert restarts == 0
    assert verdict["verdict"] == "unconfirmed" and verdict["hit_rate"] is None, verdict
    assert "sglang:prompt_tokens_total fell from 100" in verdict["reason"]
    assert "restart count" not in verdict["reason"] and "process_start_time_seconds" not in verdict["reason"]


def test_a_counter_base_that_stays_publishes_the_same_hit_rate(sim_ctx):
    with sim_ctx("sglang", {**SLOW_PREFILL, "counter_base": 1_000_000}) as (sim, ctx):
        verdict = run_prefix_cache(ctx, sim.restart_count)
    assert verdict["verdict"] == "effective" and verdict["hit_rate"] >= 0.5, verdict


def test_a_restart_during_a_step_is_a_failed_check_naming_the_step(sim_ctx):
    with sim_ctx("sglang", {"faults": {"restart_after_requests": 2}}) as (sim, ctx):
        def step() -> dict:
            with httpx.Client(timeout=10) as client:
                for _ in range(3):
                    client.post(sim.url + "/v1/completions", json={"model": ctx.endpoint.model, "prompt": "hi",
                                                                   "max_tokens": 2}).raise_for_status()
            return {"sent": 3}

        result = watch_step(ctx, "decode", sim.restart_count, step)
        row = ctx.run_dir.read_rows("checks", ctx.endpoint.engine)[0]
    assert result == {"sent": 3, "engine_restarted": True, "restarts": 1}
    assert row["scenario"] == "decode" and row["check"] == "engine_restarts" and row["outcome"] == "fail"
    assert row["evidence"]["restarts_before"] == 0 and row["evidence"]["restarts_after"] == 1
    assert "the engine restarted during step decode" in row["evidence"]["reason"]


def test_a_step_without_a_restart_passes(sim_ctx):
    with sim_ctx("vllm") as (sim, ctx):
        result = watch_step(ctx, "short", sim.restart_count, lambda: {})
        row = ctx.run_dir.read_rows("checks", ctx.endpoint.engine)[0]
    assert result == {"engine_restarted": False, "restarts": 0} and row["outcome"] == "pass"


def test_longctx_cli_fails_on_a_restart_during_the_long_context_requests(tmp_path, capsys):
    from tasks.cli import main
    from tasks.sim.process import start_sim

    with start_sim("sglang", {"context_limit": 4096, "faults": {"restart_after_requests": 3}}) as sim:
        code = main(["longctx", "--endpoint", sim.url, "--dialect", "sglang", "--model", "dayone-sim-model",
                     "--context-limit", "4096", "--lengths", "800,1600", "--depths", "0.5", "--no-model-limit",
                     "--out", str(tmp_path)])
    assert code == 1
    out = capsys.readouterr().out
    assert "engine_restarts (long_context): fail (the engine restarted during step long_context" in out
