"""The effect of a change on a figure, with its uncertainty: no winner without an interval.

Two sets of round values of one figure (A: the base or baseline, B: the variant or the new run)
give the effect as the ratio B/A of their geometric means, with a confidence interval from a
Welch t-interval on the log values (PROTOCOL.md section 8, "Effects"):

- log: throughput and latency figures are positive and their noise is multiplicative (a noisy
  neighbour slows everything by a factor), so differences of logs are ratios and the interval of a
  ratio is never negative;
- Welch: the two sides need not share a variance (one engine may be steadier than the other);
- t, not a bootstrap: with the 3 to 5 rounds a run affords, a bootstrap's interval is too narrow
  (it cannot see values beyond the ones it resamples), while the t-interval is exact for normal
  log values and its coverage is tested on simulated rounds (tests/evidence/test_effects.py).
  With paired rounds (interleaved A/B, one pair per repetition) the paired t-interval on the
  per-pair log ratios is used instead.

The verdict is "higher", "lower", or "no detectable difference" when the interval holds 1; and
"not enough rounds" with fewer than two good rounds on a side. `detectable` is the smallest
relative change this run would detect with 80% power, and `rounds_needed(effect)` how many rounds
per side a given change would need.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from scipy import stats

POWER = 0.8  # for `detectable` and `rounds_needed`
DEFAULT_CONFIDENCE = 0.95

Verdict = Literal["higher", "lower", "no detectable difference", "not enough rounds"]

# What an interval from one run's rounds covers: its rounds share one launch of each engine, so the
# launch-to-launch (run-to-run) variation is not in it. A noun phrase: "the interval covers ...".
COVERS_ROUNDS = "round-to-round noise within one deployment of each engine"


@dataclass(frozen=True)
class Effect:
    """B relative to A. `ratio`, `low`, `high` are None when there are not enough rounds."""

    verdict: Verdict
    ratio: float | None
    low: float | None
    high: float | None
    confidence: float
    detectable: float | None  # smallest relative change detectable with 80% power, e.g. 0.12 = ±12%
    rounds_a: int
    rounds_b: int
    paired: bool
    log_sd: float | None  # pooled standard deviation of one round's log value
    covers: str = COVERS_ROUNDS  # what variation the interval covers (a noun phrase)
    log_se: float | None = None  # standard error of the log ratio (widened: the between-run part included)
    df: float | None = None  # its degrees of freedom
    between_log_sd: float | None = None  # between-run sd of one run's log value that `widen` added

    @property
    def decided(self) -> bool:
        return self.verdict in ("higher", "lower")

    def excludes(self, ratio: float) -> bool:
        """Whether the whole interval lies on one side of `ratio` (e.g. a regression threshold)."""
        return self.low is not None and self.high is not None and not (self.low <= ratio <= self.high)

    def rounds_needed(self, change: float) -> int | None:
        """Rounds per side to detect a relative change of `change` (e.g. 0.05) with 80% power."""
        if self.log_sd is None or change <= -1 or change == 0:
            return None
        z = stats.norm.ppf(1 - (1 - self.confidence) / 2) + stats.norm.ppf(POWER)
        sides = 1 if self.paired else 2
        return max(2, math.ceil(sides * (z * self.log_sd / abs(math.log1p(change))) ** 2))


def _logs(values: Sequence[float | None]) -> list[float]:
    return [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]


def effect(a: Sequence[float | None], b: Sequence[float | None], confidence: float = DEFAULT_CONFIDENCE,
           paired: bool = False, covers: str = COVERS_ROUNDS) -> Effect:
    """The effect B/A of one figure from its round values (None or non-positive rounds are left out;
    with `paired`, rounds are matched by position and a pair missing either side is left out).
    `covers` names the variation the values carry: per-launch means cover launch-to-launch variation."""
    return replace(_effect(a, b, confidence, paired), covers=covers)


def widen(e: Effect, between_log_sd: float | None, covers: str | None = None,
          between_df: float | None = None) -> Effect:
    """`e` with its interval widened by a between-run component: each run's log value carries its own
    launch effect of sd `between_log_sd`, so the log ratio of two runs gains a variance 2*between_log_sd**2.
    The degrees of freedom combine by Welch-Satterthwaite (`between_df`: those of the between-run
    estimate, None for a known sd). `covers` replaces the text of what the interval covers (default: e's
    and "run-to-run variation"). None or 0, or an effect without an interval, returns `e` unchanged."""
    if not between_log_sd or e.ratio is None or e.log_se is None or e.df is None:
        return e
    within, between = e.log_se ** 2, 2 * between_log_sd ** 2
    se = math.sqrt(within + between)
    df = se ** 4 / (within ** 2 / e.df + (between ** 2 / between_df if between_df else 0.0))
    widened = _decide(math.log(e.ratio), se, df, e.confidence, e.rounds_a, e.rounds_b, e.paired, e.log_sd)
    return replace(widened, covers=covers or f"{e.covers} and run-to-run variation",
                   between_log_sd=math.hypot(e.between_log_sd or 0.0, between_log_sd))


def _effect(a: Sequence[float | None], b: Sequence[float | None], confidence: float, paired: bool) -> Effect:
    if paired:
        pairs = [(x, y) for x, y in zip(a, b) if x and y and x > 0 and y > 0]
        diffs = [math.log(y) - math.log(x) for x, y in pairs]
        n = len(diffs)
        if n < 2:
            return _undecided(confidence, n, n, paired)
        mean, sd = _mean(diffs), _sd(diffs)
        se, df = sd / math.sqrt(n), n - 1
        return _decide(mean, se, df, confidence, n, n, paired, sd / math.sqrt(2))
    la, lb = _logs(a), _logs(b)
    if len(la) < 2 or len(lb) < 2:
        return _undecided(confidence, len(la), len(lb), paired)
    va, vb = _sd(la) ** 2, _sd(lb) ** 2
    se = math.sqrt(va / len(la) + vb / len(lb))
    df = _welch_df(va, len(la), vb, len(lb))
    pooled = math.sqrt(((len(la) - 1) * va + (len(lb) - 1) * vb) / (len(la) + len(lb) - 2))
    return _decide(_mean(lb) - _mean(la), se, df, confidence, len(la), len(lb), paired, pooled)


def _decide(diff: float, se: float, df: float, confidence: float, na: int, nb: int, paired: bool,
            log_sd: float) -> Effect:
    if se == 0:  # identical rounds on both sides: no noise measured, so no interval to trust
        return _undecided(confidence, na, nb, paired)
    t = stats.t.ppf(1 - (1 - confidence) / 2, df)
    low, high = math.exp(diff - t * se), math.exp(diff + t * se)
    verdict: Verdict = "higher" if low > 1 else "lower" if high < 1 else "no detectable difference"
    detectable = math.expm1((t + stats.t.ppf(POWER, df)) * se)
    return Effect(verdict, math.exp(diff), low, high, confidence, detectable, na, nb, paired, log_sd,
                  log_se=se, df=df)


def _undecided(confidence: float, na: int, nb: int, paired: bool) -> Effect:
    return Effect("not enough rounds", None, None, None, confidence, None, na, nb, paired, None)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _sd(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _welch_df(va: float, na: int, vb: float, nb: int) -> float:
    num = (va / na + vb / nb) ** 2
    den = (va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1)
    return num / den if den > 0 else float(na + nb - 2)


def ratio_digits(low: float, high: float) -> int:
    """Decimals that keep an interval's side of 1 visible: a decided 0.9996–0.9999 must not read 1.00–1.00."""
    for digits in range(2, 7):
        if not ((low > 1 and round(low, digits) <= 1) or (high < 1 and round(high, digits) >= 1)):
            return digits
    return 6


def ratio_interval(ratio: float, low: float, high: float, label: str = "CI") -> str:
    """`1.21× (95% CI 1.10–1.33)`-style text: `label` goes before the bounds."""
    d = ratio_digits(low, high)
    return f"{ratio:.{d}f}× ({label} {low:.{d}f}–{high:.{d}f})"


def describe(e: Effect) -> str:
    """`1.21× (95% CI 1.10–1.33)` or the reason there is no interval."""
    if e.ratio is None:
        return f"not enough rounds ({e.rounds_a} vs {e.rounds_b} good rounds; 2 a side needed)"
    return ratio_interval(e.ratio, e.low, e.high, f"{e.confidence:.0%} CI")
