"""Capacity under SLO, the search and the verdict without an engine (PROTOCOL.md section 8).

A probe oracle stands in for the engine: it passes at loads up to a planted capacity. The search
must bracket (doubling from start), then bisect to within one step, whatever the capacity.
"""

from __future__ import annotations

import pytest

from tasks.config.scenarios import CapacityScenario
from tasks.scenarios.capacity import bracket, judge, next_load, outcome_of, wilson


def search(settings: CapacityScenario, passes) -> tuple[list[float], str, float | None]:
    history: list[tuple[float, bool]] = []
    while (load := next_load(settings, history)) is not None:
        assert load not in [h for h, _ in history], f"probed {load} twice"
        history.append((load, passes(load)))
        assert len(history) < 50, history
    outcome, capacity = outcome_of(settings, history)
    return [h for h, _ in history], outcome, capacity


@pytest.mark.parametrize("planted", range(1, 41))
def test_a_planted_concurrency_is_found_exactly_with_step_one(planted):
    s = CapacityScenario(start=1, max=64, step=1)
    loads, outcome, capacity = search(s, lambda load: load <= planted)
    assert outcome == "found" and capacity == planted
    assert all(float(x).is_integer() for x in loads)
    assert len(loads) <= 2 * 7  # doubling to 64, then halving the bracket: logarithmic, not a sweep


def test_the_bracket_doubles_from_start_then_bisects():
    s = CapacityScenario(start=1, max=64, step=1)
    loads, _, capacity = search(s, lambda load: load <= 12)
    assert loads == [1, 2, 4, 8, 16, 12, 14, 13] and capacity == 12


@pytest.mark.parametrize("planted", [1.3, 2.75, 7.9, 11.0, 19.5])
def test_a_planted_rate_is_found_within_one_step(planted):
    s = CapacityScenario(mode="rate", start=0.5, max=32, step=0.25)
    loads, outcome, capacity = search(s, lambda load: load <= planted)
    low, high = bracket(s, [(x, x <= planted) for x in loads])
    assert outcome == "found" and capacity is not None
    assert capacity <= planted < high and high - capacity <= 0.25


def test_a_relative_resolution_stops_earlier_than_the_step():
    s = CapacityScenario(start=1, max=256, step=1, resolution=0.1)
    loads, _, capacity = search(s, lambda load: load <= 100)
    low, high = bracket(s, [(x, x <= 100) for x in loads])
    assert capacity is not None and capacity <= 100 < high and high - capacity <= 0.1 * capacity
    assert high - capacity > 1  # stopped by the relative resolution, not by the step


def test_a_step_above_one_stops_within_that_step():
    s = CapacityScenario(start=4, max=128, step=4)
    _, _, capacity = search(s, lambda load: load <= 37)
    assert capacity is not None and 37 - 4 < capacity <= 37


def test_never_failing_reports_at_least_max_and_max_is_probed_even_off_the_doubling():
    s = CapacityScenario(start=3, max=20, step=1)
    loads, outcome, capacity = search(s, lambda load: True)
    assert loads == [3, 6, 12, 20] and outcome == "at_least_max" and capacity == 20


def test_failing_at_start_reports_below_start_after_one_probe():
    s = CapacityScenario(start=4, max=64, step=1)
    loads, outcome, capacity = search(s, lambda load: False)
    assert loads == [4] and outcome == "below_start" and capacity is None


# ---- one probe's verdict -----------------------------------------------------------------------


def test_wilson_is_the_textbook_interval():
    low, high = wilson(81, 90, 0.95)  # 0.9: Wilson (1927), z = 1.96
    assert low == pytest.approx(0.8210, abs=1e-3) and high == pytest.approx(0.9466, abs=1e-3)
    low, high = wilson(32, 32, 0.95)
    assert high == 1.0 and 0.89 < low < 0.9  # all good still leaves room below: 32 requests are not proof


def test_a_clear_pass_and_a_clear_fail_are_decided_by_the_interval():
    good = judge([(96, 96), (96, 96), (95, 96)], 0.9, 0.95)
    assert good.side == "pass" and good.verdict == "pass" and good.low >= 0.9
    bad = judge([(12, 104), (13, 104), (12, 104)], 0.9, 0.95)
    assert bad.side == "fail" and bad.verdict == "fail" and bad.high < 0.9


def test_a_share_near_the_target_is_close_and_the_point_estimate_decides():
    j = judge([(29, 32), (28, 32), (30, 32)], 0.9, 0.95)
    assert j.low < 0.9 <= j.high and j.side == "close"
    assert j.verdict == ("pass" if j.share >= 0.9 else "fail")


def test_rounds_that_disagree_widen_the_interval_beyond_wilson():
    steady = judge([(90, 100), (90, 100), (90, 100)], 0.8, 0.95)
    noisy = judge([(100, 100), (70, 100), (100, 100)], 0.8, 0.95)
    assert steady.share == pytest.approx(0.9) and noisy.share == pytest.approx(0.9)
    assert steady.side == "pass"  # 270 of 300 requests, rounds agreeing: clearly above 0.8
    assert noisy.low < steady.low and noisy.side == "close"  # one bad round of three: not established


def test_nothing_sent_is_a_fail():
    j = judge([(0, 0)], 0.9, 0.95)
    assert j.share is None and j.verdict == "fail"
