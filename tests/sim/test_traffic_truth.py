"""The simulator serves the traffic scenarios with exact ground truth: each session turn's cached tokens in
the engine's usage are the ones /sim/requests recorded for it (its prefix cache by token blocks), later turns
reuse the earlier ones, and the shared-prefix rounds' usage hit rate is the simulator's own."""

from __future__ import annotations

import pytest

from tasks.scenarios.sessions import run_sessions
from tasks.scenarios.shared_prefix import run_shared_prefix

SESSIONS = {"enabled": True, "sessions": 2, "concurrency": [2], "turns": 4, "user_tokens": 40, "output_tokens": 16,
            "think_time_s": 0.0, "rounds": 1}
SHARED = {"enabled": True, "groups": 2, "prefix_tokens": 256, "suffix_tokens": 32, "requests_per_group": 3,
          "output_tokens": 4, "concurrency": [1], "rounds": 1}


@pytest.mark.parametrize("dialect", ["sglang", "vllm"])
def test_each_turns_cached_tokens_are_the_simulators_own(sim_ctx, dialect):
    with sim_ctx(dialect, {"cache_block_tokens": 16}, {"sessions": SESSIONS, "warmup": False}) as (sim, ctx):
        run_sessions(ctx)
        truth = {r["request_id"]: r for r in sim.requests(prefix="sessions-")}
    rows = ctx.run_dir.read_rows("session_turns", ctx.endpoint.engine)
    assert len(rows) == 8 and all(r["status"] == "ok" for r in rows)
    for r in rows:
        sim_row = truth[r["request_id"]]
        assert (r["cached_tokens"], r["prompt_tokens"]) == (sim_row["cached_tokens"], sim_row["prompt_tokens"])
    for session in (0, 1):
        turns = sorted((r for r in rows if r["session"] == session), key=lambda r: r["turn"])
        assert turns[0]["cached_tokens"] == 0
        # turn k reuses turns 0..k-1: all but the last, partly filled, block of the earlier conversation
        for before, after in zip(turns, turns[1:]):
            assert after["cached_tokens"] >= before["prompt_tokens"] - 2 * 16


def test_the_shared_prefix_hit_rate_is_the_simulators_own(sim_ctx):
    with sim_ctx("vllm", {"cache_block_tokens": 16}, {"shared_prefix": SHARED, "warmup": False}) as (sim, ctx):
        run_shared_prefix(ctx)
        truth = sim.requests(prefix="shared_prefix-")
    row, = ctx.run_dir.read_rows("shared_prefix_rounds", ctx.endpoint.engine)
    assert row["usage_hit_rate"] == sum(t["cached_tokens"] for t in truth) / sum(t["prompt_tokens"] for t in truth)
    assert row["usage_hit_rate"] == row["expected_reuse"]  # prefix of whole blocks, one request at a time
    assert row["server_hit_rate"] == row["usage_hit_rate"]
