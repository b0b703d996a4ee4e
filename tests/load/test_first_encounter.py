"""First encounter: the first round of a shape new to the server is flagged and kept; warmup
covers the run's shapes so measured rounds are not (PROTOCOL.md sections 4 and 5)."""

from __future__ import annotations

import pytest

from tasks.load.plan import Shape
from tasks.scenarios.perf import run_perf
from tasks.scenarios.warmup import reset_shapes, run_shapes, run_warmup, seen_shapes
from tasks.sim.process import start_sim

JIT_S = 0.4


def test_a_first_encounter_round_is_flagged_and_its_tail_kept(make_ctx, short):
    with start_sim("sglang", {"ttft_base_s": 0.02, "itl_s": 0.002, "jit_delay_s": JIT_S, "slots": 8}) as sim:
        ctx = make_ctx(sim.url, scenarios=short([2], rounds=3, requests=4, output=8))
        reset_shapes(ctx.run_dir, "sim")
        summary = run_perf(ctx, "short")
    rounds = {r["round"]: r for r in ctx.run_dir.read_rows("rounds", "sim")}
    assert [rounds[n]["first_encounter"] for n in (1, 2, 3)] == [True, False, False]
    # The engine paused to compile: the first round's tail carries it, later rounds do not.
    assert rounds[1]["ttft_p99_s"] >= JIT_S
    assert rounds[2]["ttft_p99_s"] < JIT_S / 4 and rounds[3]["ttft_p99_s"] < JIT_S / 4
    level = summary["levels"][0]
    assert level["first_encounter"]["round"] == 1
    assert level["first_encounter"]["ttft_p99_s"] == pytest.approx(rounds[1]["ttft_p99_s"])
    # Kept, not dropped: its value is among the round values, and the median is over all three.
    assert level["figures"]["ttft_p99_s"]["rounds"][0] == pytest.approx(rounds[1]["ttft_p99_s"])
    assert len(level["figures"]["ttft_p99_s"]["rounds"]) == 3
    first_rows = [r for r in ctx.run_dir.read_rows("requests", "sim") if r["round"] == 1]
    assert len(first_rows) == 4 and all(r["first_encounter"] for r in first_rows)


def test_warmup_covers_the_shapes_so_measured_rounds_are_not_first(make_ctx, short):
    with start_sim("sglang", {"ttft_base_s": 0.02, "itl_s": 0.002, "jit_delay_s": JIT_S, "slots": 8}) as sim:
        scenarios = {**short([1, 2], rounds=1, requests=4, output=8), "prefill": {"enabled": False},
                     "decode": {"enabled": False}}
        ctx = make_ctx(sim.url, scenarios=scenarios)
        reset_shapes(ctx.run_dir, "sim")
        shapes = run_shapes(ctx.config)
        assert shapes == [Shape(32, 8, 1), Shape(32, 8, 2)]
        warm = run_warmup(ctx)
        assert [s["first_encounter"] for s in warm["shapes"]] == [True, True]
        assert {s.key for s in shapes} <= seen_shapes(ctx.run_dir, "sim")
        run_perf(ctx, "short")
    measured = ctx.run_dir.read_rows("rounds", "sim")
    warmup_rounds = [r for r in measured if r["warmup"]]
    perf_rounds = [r for r in measured if not r["warmup"]]
    assert warmup_rounds and all(r["scenario"] == "warmup" for r in warmup_rounds)
    assert perf_rounds and not any(r["first_encounter"] for r in perf_rounds)
    assert all(r["ttft_p99_s"] < JIT_S / 4 for r in perf_rounds)


def test_redeploy_resets_the_seen_shapes(make_ctx, tmp_path):
    ctx = make_ctx("http://127.0.0.1:9")
    from tasks.scenarios.warmup import mark_seen

    mark_seen(ctx.run_dir, "sim", Shape(128, 64, 4))
    assert seen_shapes(ctx.run_dir, "sim") == {"in128-out64-c4"}
    reset_shapes(ctx.run_dir, "sim")
    assert seen_shapes(ctx.run_dir, "sim") == set()
