"""The frontier chart compares like with like (issue 43, item 11): a point rests on the level's steady rounds (a
first-encounter round pays its compilation, as the comparisons leave it out), and it is per GPU only when every
engine of the run has a GPU count; else every engine's point is of the whole server."""

from __future__ import annotations

import math

import pytest

from tasks.report.frontier import frontier, frontier_chart, level_points
from tasks.report.schema import RunSummary
from tasks.report.schema.engine import EngineSummary
from tasks.report.schema.perf import Figure, PerfLevel
from tasks.report.schema.telemetry import Hardware


def _level(c: int, tps: list[float], tpot: list[float], first: list[int] = ()) -> PerfLevel:  # type: ignore[assignment]
    return PerfLevel(label=f"c={c}", concurrency=c, rate_rps=None, rounds=[1, 2, 3, 4], round_status=["ok"] * 4,
                     first_encounter_rounds=list(first), first_encounter=None, rounds_failed=0, requests_failed=0,
                     length_deviations=0,
                     figures={"output_tps": Figure(median=None, rounds=tps, spread=False),
                              "tpot_p50_s": Figure(median=None, rounds=tpot, spread=False)})


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def test_a_point_rests_on_the_steady_rounds_only():
    cold = _level(4, [20.0, 300.0, 310.0, 305.0], [0.5, 0.02, 0.021, 0.019], first=[1])
    [point] = level_points([cold], gpus=None, confidence=0.95)
    assert point.total_tps[0] == pytest.approx(_geomean([300.0, 310.0, 305.0]))
    assert point.per_user_tps[0] == pytest.approx(_geomean([50.0, 1 / 0.021, 1 / 0.019]))


def _engine(gpus: int | None) -> EngineSummary:
    levels = [_level(1, [100.0, 101.0, 99.0, 100.0], [0.01] * 4), _level(8, [400.0, 410.0, 390.0, 400.0], [0.02] * 4)]
    hardware = None if gpus is None else Hardware.model_construct(gpu_count=gpus)
    return EngineSummary.model_construct(perf={}, traffic_levels={"sessions": levels}, hardware=hardware,
                                         ttft=None)


def test_per_gpu_only_when_every_engine_has_a_gpu_count():
    counted = RunSummary.model_construct(engines={"a": _engine(2), "b": _engine(4)}, confidence=0.95)
    assert [p.per_gpu for name in ("a", "b") for p in frontier(counted, name, "sessions")] == [True] * 4
    assert frontier(counted, "a", "sessions")[0].total_tps[0] == pytest.approx(_geomean([50.0, 50.5, 49.5, 50.0]))
    partly = RunSummary.model_construct(engines={"a": _engine(2), "b": _engine(None)}, confidence=0.95)
    assert [p.per_gpu for name in ("a", "b") for p in frontier(partly, name, "sessions")] == [False] * 4
    assert frontier(partly, "a", "sessions")[0].total_tps[0] == pytest.approx(_geomean([100.0, 101.0, 99.0, 100.0]))
    assert frontier_chart(partly) is not None
