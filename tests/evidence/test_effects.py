"""Effects with intervals (tasks/stats/effects.py), checked on simulated rounds with a planted
effect: the interval covers the planted ratio at its nominal rate, a planted +20% is detected, and
+0% gives "no detectable difference" in at least 95% of seeded repetitions."""

from __future__ import annotations

import math
import random

import pytest

from tasks.stats.effects import describe, effect

REPS = 2000


def _rounds(rng: random.Random, n: int, median: float, log_sd: float) -> list[float]:
    return [median * math.exp(rng.gauss(0, log_sd)) for _ in range(n)]


def _simulate(planted: float, n: int, log_sd_a: float, log_sd_b: float, paired: bool = False, seed: int = 7):
    rng = random.Random(seed)
    outcomes = []
    for _ in range(REPS):
        a = _rounds(rng, n, 100.0, log_sd_a)
        b = _rounds(rng, n, 100.0 * planted, log_sd_b)
        outcomes.append(effect(a, b, paired=paired))
    return outcomes


@pytest.mark.parametrize("planted,n,sd_a,sd_b", [
    (1.0, 3, 0.05, 0.05), (1.2, 3, 0.05, 0.05), (1.0, 5, 0.03, 0.10), (0.7, 4, 0.08, 0.02),
])
def test_the_interval_covers_the_planted_ratio_at_its_nominal_rate(planted, n, sd_a, sd_b):
    outcomes = _simulate(planted, n, sd_a, sd_b)
    covered = sum(e.low <= planted <= e.high for e in outcomes) / REPS
    print(f"planted {planted}, {n} rounds, log sd {sd_a}/{sd_b}: coverage {covered:.3f}")
    assert covered >= 0.93  # nominal 95%; Welch's df is an approximation, slightly conservative


def test_no_change_gives_no_detectable_difference_in_at_least_95_percent():
    outcomes = _simulate(1.0, 3, 0.05, 0.05, seed=11)
    rate = sum(e.verdict == "no detectable difference" for e in outcomes) / REPS
    print(f"+0%: no detectable difference in {rate:.3f} of {REPS}")
    assert rate >= 0.95


def test_a_planted_20_percent_gain_is_detected_with_the_interval_covering_it():
    outcomes = _simulate(1.2, 3, 0.03, 0.03, seed=3)
    detected = [e for e in outcomes if e.verdict == "higher"]
    print(f"+20%: detected in {len(detected) / REPS:.3f}")
    assert len(detected) / REPS >= 0.95
    assert sum(e.low <= 1.2 <= e.high for e in detected) / len(detected) >= 0.93
    assert not any(e.verdict == "lower" for e in outcomes)


def test_a_drop_is_lower_and_the_detectable_change_shrinks_with_rounds():
    rng = random.Random(5)
    a, b = _rounds(rng, 5, 100, 0.02), _rounds(rng, 5, 70, 0.02)
    e = effect(a, b)
    assert e.verdict == "lower" and e.high < 1 and e.excludes(0.9) and not e.excludes(0.7)
    few = effect(a[:2], b[:2])
    assert few.detectable > e.detectable > 0
    needed = e.rounds_needed(0.05)
    assert needed is not None and needed >= 2 and e.rounds_needed(0.01) > needed


def test_noise_as_large_as_the_gap_is_no_winner():
    """The demo's flip: round values 27.7-33.0 vs 24.9-27.2 named opposite leaders on two runs."""
    e = effect([27.7, 33.0, 30.1], [24.9, 27.2, 26.0])
    assert e.verdict == "no detectable difference", describe(e)
    assert e.low < 1 < e.high


def test_paired_rounds_cancel_drift_that_unpaired_rounds_cannot():
    """A slow drift hits both sides of each pair alike (interleaved A/B): pairing sees a 5% effect that
    the unpaired interval, swamped by the drift, cannot."""
    drift = [1.0, 1.3, 1.6, 1.9]
    a = [100 * d for d in drift]
    b = [105 * d * (1 + 0.005 * (-1) ** i) for i, d in enumerate(drift)]
    assert effect(a, b, paired=True).verdict == "higher"
    assert effect(a, b).verdict == "no detectable difference"


def test_too_few_rounds_or_failed_rounds_give_no_verdict():
    e = effect([10.0, None, 0.0], [11.0, 12.0])
    assert e.verdict == "not enough rounds" and e.ratio is None
    assert "not enough rounds (1 vs 2 good rounds" in describe(e)
    assert effect([5.0, 5.0], [6.0, 6.0]).verdict == "not enough rounds"  # no noise measured: no interval


def test_a_decided_interval_next_to_1_keeps_its_side_visible():
    """One UI run read "1.00× (95% CI 1.00–1.00), worse": two decimals hid a real, tiny effect."""
    from tasks.stats.effects import ratio_interval

    assert ratio_interval(0.9998, 0.99965, 0.99991, "95% CI") == "0.9998× (95% CI 0.9997–0.9999)"
    assert ratio_interval(1.21, 1.1, 1.33) == "1.21× (CI 1.10–1.33)"
    assert ratio_interval(1.0, 0.98, 1.02) == "1.00× (CI 0.98–1.02)"  # undecided: two decimals say it


def test_widen_adds_the_between_run_variance_and_says_what_the_interval_covers():
    from tasks.stats.effects import COVERS_ROUNDS, widen

    e = effect([10.0, 11.0, 10.5], [12.0, 12.5, 11.8])
    assert e.verdict == "higher" and e.covers == COVERS_ROUNDS
    assert widen(e, None) is e and widen(e, 0.0) is e
    w = widen(e, 0.05, covers="rounds and run-to-run variation from 6 runs")
    assert w.log_se == pytest.approx(math.sqrt(e.log_se ** 2 + 2 * 0.05 ** 2))
    assert w.ratio == e.ratio and w.low < e.low and w.high > e.high and w.detectable > e.detectable
    assert w.verdict == "no detectable difference"  # recomputed on the wider interval
    assert w.covers == "rounds and run-to-run variation from 6 runs" and w.between_log_sd == 0.05
    assert effect([1.0, 1.1], [1.2, 1.3], covers="launch means").covers == "launch means"


@pytest.mark.parametrize("paired", [False, True])
def test_rounds_that_never_vary_measure_no_noise_and_give_no_interval(paired):
    """[5,5,5] vs [6,6,6] read "higher, CI 1.20–1.20": the logs' float rounding passed for noise."""
    e = effect([5.0, 5.0, 5.0], [6.0, 6.0, 6.0], paired=paired)
    assert e.verdict == "not enough rounds" and e.ratio is None and e.low is None, describe(e)
    assert "no noise measured" in describe(e) and e.detectable is None and e.rounds_needed(0.05) is None
    tiny = effect([5.0, 5.0 * (1 + 1e-9), 5.0 * (1 - 1e-9)], [6.0, 6.0 * (1 - 1e-9), 6.0 * (1 + 1e-9)], paired=paired)
    assert tiny.verdict == "higher"  # a real, tiny spread is still noise measured


@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_a_non_finite_round_is_left_out_never_a_nan_interval(paired, bad):
    """An infinite value made a NaN interval labelled "no detectable difference"."""
    e = effect([10.0, 11.0, 10.5, bad], [12.0, 12.5, 11.8, 12.2], paired=paired)
    assert e.rounds_a == 3 and (e.rounds_b == 3 if paired else e.rounds_b == 4)
    assert all(math.isfinite(x) for x in (e.ratio, e.low, e.high, e.detectable)), describe(e)
    assert e.verdict == "higher" and "nan" not in describe(e)
    only = effect([bad, bad, 10.0], [12.0, 12.5, 11.8], paired=paired)
    assert only.verdict == "not enough rounds" and only.ratio is None


def test_every_described_interval_says_what_it_covers():
    """"1.22× (95% CI 1.16–1.29)" read as an interval for the next run; it covered one launch's rounds."""
    from tasks.stats.effects import ratio_interval, widen

    e = effect([10.0, 11.0, 10.5], [12.0, 12.5, 11.8])
    assert describe(e).endswith("CI 1.05–1.27, covering round-to-round noise within one deployment of each engine)")
    assert describe(widen(e, 0.03, "rounds and 8 past runs")).endswith(", covering rounds and 8 past runs)")
    assert ratio_interval(1.21, 1.1, 1.33, "CI", "launch means") == "1.21× (CI 1.10–1.33, covering launch means)"


def test_the_decision_lines_carry_what_each_interval_covers_and_why_there_is_none():
    from tasks.report.decision import comparison_words
    from tasks.report.schema.comparison import Comparison

    def comparison(e, verdict):
        return Comparison(scenario="short", level="c=4", figure="output_tps", base="a", engine="b", ratio=e.ratio,
                          low=e.low, high=e.high, confidence=0.95, verdict=verdict, detectable=e.detectable,
                          rounds_needed_for_5pct=e.rounds_needed(0.05), covers=e.covers, reason=e.reason)

    better = effect([10.0, 11.0, 10.5], [12.0, 12.5, 11.8])
    assert comparison_words(comparison(better, "better")) == (
        "at c=4 1.15× (95% CI 1.05–1.27, covering round-to-round noise within one deployment of each engine), "
        "better")
    flat = effect([5.0, 5.0, 5.0], [6.0, 6.0, 6.0])
    assert comparison_words(comparison(flat, flat.verdict)).startswith("not enough rounds at c=4 (no noise measured")
