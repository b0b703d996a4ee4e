"""Engines and runs compared: each engine against the base engine, and this run against its baselines
(tasks/stats/effects.py, tasks/compare/nightly.py)."""

from __future__ import annotations

from typing import Literal

from tasks.report.schema.base import Doc


class Regression(Doc):
    engine: str
    scenario: str
    concurrency: int | None
    metric: str
    baseline_run_id: str | None
    baseline_value: float | None
    value: float | None
    change: float | None
    threshold: float | None
    regressed: bool
    ratio: float | None = None  # this run / baseline over rounds (geometric means), with its interval
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str | None = None
    baseline_kind: str | None = None  # last_good or reference (tasks/compare/nightly.py)
    covers: str | None = None  # what variation the interval covers


class Comparison(Doc):
    """One engine against the base engine (the config's first) on one figure of one level
    (tasks/stats/effects.py): the ratio engine/base of the geometric means of their round values,
    with its confidence interval, and the verdict read with the figure's direction."""

    scenario: str
    level: str  # the level's label, e.g. c=4
    figure: str
    base: str
    engine: str
    ratio: float | None  # None: not enough rounds
    low: float | None
    high: float | None
    confidence: float
    verdict: Literal["better", "worse", "no detectable difference", "not enough rounds"]
    detectable: float | None  # the smallest change this run would detect, e.g. 0.14 = ±14%
    rounds_needed_for_5pct: int | None  # rounds a side that would detect a 5% change
    paired: bool = False  # interleaved rounds (or launches), paired by repetition; else two independent samples
    # What variation the interval covers (tasks/stats/effects.py): the rounds of one deployment, or with
    # measurement.launches > 1 the engines' starts, each launch the geometric mean of its rounds.
    covers: str | None = None
    launches: int = 1  # the launches a side the interval rests on (1: its values are rounds)
    reason: str | None = None  # why there is no interval (too few rounds, no noise measured)

    def interval(self, covers: bool = False) -> str:
        """`1.21× (95% CI 1.10–1.33)` (with `covers`: `..., covering round-to-round noise ...)`), or the
        verdict when there is no interval."""
        if self.ratio is None or self.low is None or self.high is None:
            return self.verdict
        from tasks.stats.effects import ratio_interval

        return ratio_interval(self.ratio, self.low, self.high, f"{self.confidence:.0%} CI",
                              self.covers if covers else None)
