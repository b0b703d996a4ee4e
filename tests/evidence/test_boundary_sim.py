"""The boundary re-test: a restart is a failed check even when every request got its answer."""

from __future__ import annotations

from tasks.evidence.boundary import restarts_outcome, run_boundary


def test_no_restart_passes_and_needles_are_kept(sim_ctx):
    with sim_ctx("sglang") as (sim, ctx):
        rows = run_boundary(ctx, sim.restart_count, settle_s=0.1)
        checks = ctx.run_dir.read_rows("checks", ctx.endpoint.engine)
        needles = ctx.run_dir.read_rows("needles", ctx.endpoint.engine)
    assert [r["target_tokens"] for r in needles] == [3000, 3500]
    assert all(r["scenario"] == "boundary" and r["passed"] and r["prompt_tokens"] == r["target_tokens"] for r in needles)
    assert [c["check"] for c in checks] == ["boundary_restarts"] and checks[0]["outcome"] == "pass"
    assert rows[-1] == checks[0] and rows[:-1] == needles


def test_a_restart_fails_the_check_even_though_the_request_was_answered(sim_ctx):
    # Finished generations: readiness probe 1, template probe 2, needle 3000 -> 3, probe 4, needle 3500 -> 5.
    profile = {"faults": {"crash_after_requests": 5, "restart_on_crash": True}}
    with sim_ctx("sglang", profile) as (sim, ctx):
        rows = run_boundary(ctx, sim.restart_count, settle_s=1.0)  # the crash comes 50 ms after the answer
        restarts = sim.restart_count()
    needles, check = rows[:-1], rows[-1]
    assert restarts == 1
    assert all(r["passed"] for r in needles)  # every request got its exact answer
    assert check["outcome"] == "fail"
    assert "3500 tokens (0 -> 1)" in check["evidence"]["reason"]


def test_outcome_rules():
    assert restarts_outcome([{"target_tokens": 1, "before": 0, "after": 0}]) == (
        "pass", "no restart across the boundary requests")
    assert restarts_outcome([{"target_tokens": 1, "before": None, "after": None}])[0] == "not_applicable"
    assert restarts_outcome([{"target_tokens": 1, "before": 2, "after": None}])[0] == "fail"
    assert restarts_outcome([{"target_tokens": 9, "before": 2, "after": 3}])[0] == "fail"
