"""A probe's rounds: the configured rounds, then one more at a time while the goodput-share
interval holds the target, at most extra_rounds (PROTOCOL.md section 8, "Capacity under SLO").

The engine is replaced by rounds of known shares, so only the search's bookkeeping is under test.
"""

from __future__ import annotations

import pytest

import tasks.scenarios.capacity as capacity
from capacity_helpers import fake_context

REQUESTS = 40


def test_a_close_probe_gets_extra_rounds_up_to_the_bound_then_the_point_estimate_decides(tmp_path, rounds_of_shares):
    # 36 of 40 good (0.9) at load 5, the target: the interval holds it whatever the rounds.
    sent = rounds_of_shares(lambda load, n: 1.0 if load <= 4 else 0.9 if load == 5 else 0.0)
    ctx = fake_context(tmp_path, start=4, max=8, rounds=2, extra_rounds=3)
    result = capacity.run_capacity(ctx)
    assert len(ctx.run_dir.read_rows("requests", "fake")) == sum(p["requests"] for p in result["probes"])
    by_load = {p["load"]: p for p in result["probes"]}
    assert [p["load"] for p in result["probes"]] == [4, 8, 6, 5]
    assert by_load[4]["rounds"] == 2 and by_load[4]["decided_by"] == "interval"  # 80 of 80: clear
    assert by_load[8]["rounds"] == 2 and by_load[8]["verdict"] == "fail"
    close = by_load[5]
    assert close["rounds"] == 2 + 3 and close["close"] and close["decided_by"] == "point estimate"
    assert close["ci_low"] < 0.9 <= close["ci_high"] and close["verdict"] == "pass"  # 0.9 >= 0.9
    assert [n for load, n in sent if load == 5] == [1, 2, 3, 4, 5]
    assert result["capacity"] == 5 and result["outcome"] == "found"
    row = next(r for r in ctx.run_dir.read_rows("capacity", "fake") if r["concurrency"] == 5)
    assert row["rounds"] == 5 and row["requests"] == 5 * REQUESTS and row["close"] is True


def test_extra_rounds_stop_as_soon_as_the_interval_leaves_the_target(tmp_path, rounds_of_shares):
    # Round 1 is bad, the rest perfect: two rounds straddle 0.8, the third settles it.
    rounds_of_shares(lambda load, n: (0.5 if n == 1 else 1.0) if load == 2 else 0.0)
    ctx = fake_context(tmp_path, start=2, max=2, rounds=2, extra_rounds=4, target_goodput_share=0.6)
    [probe] = capacity.run_capacity(ctx)["probes"]
    assert 2 < probe["rounds"] < 2 + 4 and not probe["close"] and probe["decided_by"] == "interval"
    assert probe["round_shares"][0] == 0.5 and probe["verdict"] == "pass"


def test_no_extra_rounds_when_none_are_allowed(tmp_path, rounds_of_shares):
    rounds_of_shares(lambda load, n: 0.9)
    ctx = fake_context(tmp_path, start=3, max=3, rounds=3, extra_rounds=0)
    [probe] = capacity.run_capacity(ctx)["probes"]
    assert probe["rounds"] == 3 and probe["close"] and probe["verdict"] == "pass"


def test_an_engine_that_is_gone_ends_the_search_and_the_probes_so_far_stay(tmp_path, rounds_of_shares):
    # Up to 8 the engine serves; at 16 nothing connects (it crashed): that is no capacity of 8.
    rounds_of_shares(lambda load, n: 1.0 if load <= 8 else None)
    ctx = fake_context(tmp_path, start=2, max=64, rounds=2)
    with pytest.raises(capacity.EngineGone, match="in128-out64-c16.*Connection refused"):
        capacity.run_capacity(ctx)
    assert [r["concurrency"] for r in ctx.run_dir.read_rows("capacity", "fake")] == [2, 4, 8]
