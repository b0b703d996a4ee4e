"""The throughput-latency frontier (tasks/report/frontier.py): per level, 1/TPOT against output tokens/s
(per GPU where known), medians over rounds with a t interval; a level without published TPOT has no point;
the report draws every engine on one chart."""

from __future__ import annotations

import math

import pytest

from tasks.report.frontier import frontier_points, t_interval
from tasks.report.schema.perf import Figure, PerfLevel


def _level(c: int, tps: list[float | None], tpot: list[float | None]) -> PerfLevel:
    return PerfLevel(label=f"c={c}", concurrency=c, rate_rps=None, rounds=[1, 2, 3], round_status=["ok"] * 3,
                     first_encounter_rounds=[], first_encounter=None, rounds_failed=0, requests_failed=0,
                     length_deviations=0,
                     figures={"output_tps": Figure(median=None, rounds=tps, spread=False),
                              "tpot_p50_s": Figure(median=None, rounds=tpot, spread=False)})


def test_a_point_is_per_user_speed_against_total_speed_per_gpu():
    levels = [_level(1, [100.0, 110.0, 90.0], [0.01, 0.0125, 0.008]), _level(8, [600.0, 640.0, 620.0], [0.02] * 3)]
    one, eight = frontier_points(levels, gpus=2)
    assert (one.label, one.total_tps, one.per_user_tps) == ("c=1", 50.0, 100.0)
    assert (eight.total_tps, eight.per_user_tps) == (310.0, 50.0)
    low, high = one.total_interval
    assert low < 50.0 < high and math.isclose((low + high) / 2, 50.0)
    assert eight.per_user_interval == pytest.approx((50.0, 50.0))


def test_a_level_without_published_tpot_has_no_point_and_one_round_no_interval():
    withheld = _level(4, [300.0, 310.0, 305.0], [None, None, None])
    single = _level(2, [200.0, None, None], [0.01, None, None])
    (point,) = frontier_points([withheld, single])
    assert point.label == "c=2" and point.total_interval is None and point.per_user_interval is None
    assert t_interval([1.0]) is None
