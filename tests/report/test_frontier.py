"""The throughput-latency frontier (tasks/report/frontier.py): per level, 1/TPOT against output tokens/s
(per GPU where known), geometric means over rounds with a t interval on their logs; a level without
published TPOT, or with one good round, has no point."""

from __future__ import annotations

import math

import pytest

from tasks.report.frontier import level_points
from tasks.report.schema.perf import Figure, PerfLevel


def _level(c: int, tps: list[float | None], tpot: list[float | None]) -> PerfLevel:
    return PerfLevel(label=f"c={c}", concurrency=c, rate_rps=None, rounds=[1, 2, 3], round_status=["ok"] * 3,
                     first_encounter_rounds=[], first_encounter=None, rounds_failed=0, requests_failed=0,
                     length_deviations=0,
                     figures={"output_tps": Figure(median=None, rounds=tps, spread=False),
                              "tpot_p50_s": Figure(median=None, rounds=tpot, spread=False)})


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def test_a_point_is_per_user_speed_against_total_speed_per_gpu():
    levels = [_level(1, [100.0, 110.0, 90.0], [0.01, 0.0125, 0.008]), _level(8, [600.0, 640.0, 620.0], [0.02] * 3)]
    one, eight = level_points(levels, gpus=2, confidence=0.95)
    assert one.level == "c=1" and one.per_gpu
    assert one.total_tps[0] == pytest.approx(_geomean([50.0, 55.0, 45.0]))
    assert one.per_user_tps[0] == pytest.approx(100.0)  # 1/TPOT: 100, 80 and 125 tokens/s
    low, high = one.total_tps[1:]
    assert low < one.total_tps[0] < high and low * high == pytest.approx(one.total_tps[0] ** 2)  # symmetric in logs
    assert eight.total_tps[0] == pytest.approx(_geomean([300.0, 320.0, 310.0]))
    assert eight.per_user_tps == pytest.approx((50.0, 50.0, 50.0))  # identical rounds: no width


def test_a_level_without_published_tpot_or_with_one_good_round_has_no_point():
    withheld = _level(4, [300.0, 310.0, 305.0], [None, None, None])
    single = _level(2, [200.0, None, None], [0.01, None, None])
    two = _level(6, [200.0, 210.0, None], [0.01, 0.011, None])
    assert [p.level for p in level_points([withheld, single, two], gpus=None, confidence=0.95)] == ["c=6"]


def test_a_traffic_scenario_swept_over_levels_has_a_frontier_panel():
    from tasks.report.frontier import frontier, frontier_scenarios
    from tasks.report.schema import RunSummary
    from tasks.report.schema.engine import EngineSummary

    engine = EngineSummary.model_construct(perf={}, traffic_levels={
        "sessions": [_level(1, [100.0, 110.0, 90.0], [0.01] * 3), _level(4, [300.0, 320.0, 310.0], [0.02] * 3)],
        "dataset": [_level(2, [200.0, 210.0, 190.0], [0.01] * 3)]}, hardware=None)
    summary = RunSummary.model_construct(engines={"vllm": engine}, confidence=0.95)
    assert frontier_scenarios(summary) == ["sessions"]  # one level is no sweep
    assert [p.level for p in frontier(summary, "vllm", "sessions")] == ["c=1", "c=4"]
