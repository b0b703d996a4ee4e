"""Intervals of means and of shares, and of the difference of two shares: the one home of each (the effects
of ratios and their widening across runs are in effects.py and history.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats

DEFAULT_CONFIDENCE = 0.95


def mean_t_interval(values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE,
                    bounds: tuple[float, float] = (-math.inf, math.inf)) -> tuple[float, float, float] | None:
    """(mean, low, high): Student's t-interval of the mean of `values`, or None under two values. `bounds`
    clip the interval to where the quantity can lie (a share to [0, 1]); the mean itself is never clipped."""
    k = len(values)
    if k < 2:
        return None
    mean = sum(values) / k
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, k - 1)) * sd / math.sqrt(k)
    return mean, max(bounds[0], mean - half), min(bounds[1], mean + half)


def share_t_interval(shares: Sequence[float], confidence: float) -> tuple[float, float] | None:
    """A t-interval on per-round shares, within [0, 1] (None with fewer than two rounds)."""
    found = mean_t_interval(shares, confidence, bounds=(0.0, 1.0))
    return None if found is None else (found[1], found[2])


def wilson(good: int, n: int, confidence: float) -> tuple[float, float]:
    """The Wilson score interval of a binomial share (sensible at 0 and 1, unlike the normal one); no
    trials say nothing: (0, 1)."""
    if n <= 0:
        return 0.0, 1.0
    ci = stats.binomtest(good, n).proportion_ci(confidence_level=confidence, method="wilson")
    return max(0.0, float(ci.low)), min(1.0, float(ci.high))


def newcombe(x_now: int, n_now: int, x_then: int, n_then: int, confidence: float) -> tuple[float, float]:
    """Newcombe's hybrid score interval of the difference of two proportions, now - then (each side's
    Wilson interval combined; sensible at 0 and 1, where the Wald interval collapses)."""
    p1, p2 = x_now / n_now, x_then / n_then
    l1, u1 = wilson(x_now, n_now, confidence)
    l2, u2 = wilson(x_then, n_then, confidence)
    d = p1 - p2
    return d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


def median_interval(values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float] | None:
    """A distribution-free interval of the median: the order statistics the binomial(n, 1/2) brackets
    (None with fewer than 6 values, where no pair of them reaches 95%)."""
    xs = sorted(values)
    n = len(xs)
    if n < 6:
        return None
    lo = int(stats.binom.ppf((1 - confidence) / 2, n, 0.5))
    hi = n - lo + 1
    lo = max(lo, 1)
    return xs[lo - 1], xs[min(hi, n) - 1]
