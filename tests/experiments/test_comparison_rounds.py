"""Which rounds a comparison reads: the steady ones (never a first-encounter round), paired by repetition
only when the engines were measured together."""

from __future__ import annotations

import pytest

from tasks.report.schema.engine import EngineSummary
from tasks.report.schema.perf import Figure, PerfLevel, ScenarioResults
from tasks.report.summary import comparisons


def _engine(values: list[float], first_encounter: list[int], together: list[str]) -> EngineSummary:
    level = PerfLevel.model_construct(
        label="c=4", concurrency=4, rate_rps=None, rounds=list(range(1, len(values) + 1)),
        first_encounter_rounds=first_encounter,
        figures={"output_tps": Figure(median=sorted(values)[len(values) // 2], rounds=values, spread=False)})
    return EngineSummary.model_construct(perf={"short": ScenarioResults.model_construct(
        input_tokens=64, output_tokens=32, levels=[level], interleaved_with=together)})


def _output_tps(engines):
    [c] = [c for c in comparisons(engines, "a", 0.95) if c.figure == "output_tps"]
    return c


def test_a_first_encounter_round_is_left_out_of_the_effect():
    # round 1 met the shape first on both (warmup off): a compile pause that differs 3x between them,
    # where the steady rounds differ 1.2x; with it the interval would span 1
    steady = _output_tps({"a": _engine([10, 100, 101, 99, 100], [1], ["b"]),
                          "b": _engine([30, 120, 121, 119, 120], [1], ["a"])})
    assert steady.paired and steady.verdict == "better"
    assert 1.15 < steady.low <= steady.ratio <= steady.high < 1.25


def test_rounds_pair_only_when_the_engines_were_measured_together():
    apart = _output_tps({"a": _engine([100, 101, 99, 100], [], []), "b": _engine([120, 121, 119, 120], [], [])})
    together = _output_tps({"a": _engine([100, 101, 99, 100], [], ["b"]),
                            "b": _engine([120, 121, 119, 120], [], ["a"])})
    assert not apart.paired and together.paired
    assert apart.ratio == pytest.approx(together.ratio)
    assert together.high - together.low < apart.high - apart.low  # pairing removes the rounds' common part
