"""The effect of a change on a figure, with its uncertainty: no winner without an interval.

Two sets of round values of one figure (A: the base or baseline, B: the variant or the new run) give
the ratio B/A of their geometric means with a Welch (or, paired, a paired) t-interval on the log
values, a verdict ("higher", "lower", "no detectable difference", "not enough rounds"), the change the
run could detect (`detectable`) and the rounds a change needs (`rounds_needed`). Why log values, Welch
and t rather than a bootstrap, and what an interval covers (`covers`, `widen`): PROTOCOL.md section 8,
"Effects".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy import optimize, special, stats

from tasks.stats.intervals import mean_t_interval

POWER = 0.8  # for `detectable` and `rounds_needed`
DEFAULT_CONFIDENCE = 0.95
# A standard error this small relative to the log values is float rounding of identical rounds, not noise
ZERO_NOISE = 1e-12

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
    rounds_a: int
    rounds_b: int
    paired: bool
    log_sd: float | None  # one round's log sd, pooled over both sides (paired: a pair's log-ratio sd over √2)
    covers: str = COVERS_ROUNDS  # what variation the interval covers (a noun phrase)
    log_se: float | None = None  # standard error of the log ratio (widened: the between-run part included)
    df: float | None = None  # its degrees of freedom
    between_log_sd: float | None = None  # between-run sd of one run's log value that `widen` added
    reason: str | None = None  # why there is no interval, when there is none
    log_sds: tuple[float, float] | None = None  # each side's log sd (paired: log_sd on both)

    @property
    def decided(self) -> bool:
        return self.verdict in ("higher", "lower")

    def excludes(self, ratio: float) -> bool:
        """Whether the whole interval lies on one side of `ratio` (e.g. a regression threshold)."""
        return self.low is not None and self.high is not None and not (self.low <= ratio <= self.high)

    @functools.cached_property
    def detectable(self) -> float | None:
        """The smallest relative change (e.g. 0.12 = ±12%) a run with these rounds and this noise detects
        with 80% power; computed when asked (a root of the power, milliseconds)."""
        if self.log_se is None or self.log_sds is None:
            return None
        power_of = _power_curve(self.rounds_a, self.rounds_b, *self.log_sds, self.paired, self.confidence,
                                self.between_log_sd)
        high = 1.0
        while power_of(high) < POWER:
            high *= 2
        return math.expm1(optimize.brentq(lambda d: power_of(d) - POWER, 0.0, high, xtol=1e-7))

    def rounds_needed(self, change: float) -> int | None:
        """Rounds per side (pairs when paired) to detect a relative change of `change` (e.g. 0.05) with
        80% power at this effect's noise; None when no number of rounds would (a between-run floor)."""
        if self.log_sds is None:
            return None
        return rounds_for(change, *self.log_sds, self.paired, self.confidence, self.between_log_sd)


def power(change: float, n_a: int, n_b: int, log_sd_a: float, log_sd_b: float, paired: bool,
          confidence: float = DEFAULT_CONFIDENCE, between_log_sd: float | None = None) -> float:
    """Probability that a run of n_a and n_b rounds (paired: n_a pairs) whose log values have sd
    log_sd_a and log_sd_b detects a true relative change `change`: its interval excludes 1."""
    return _power_curve(n_a, n_b, log_sd_a, log_sd_b, paired, confidence, between_log_sd)(abs(math.log1p(change)))


def _power_curve(n_a: int, n_b: int, log_sd_a: float, log_sd_b: float, paired: bool, confidence: float,
                 between_log_sd: float | None) -> Callable[[float], float]:
    """Power as a function of the true log ratio, exact for normal log values: the estimated log ratio is
    normal around the truth, independent of the sd estimates, and the interval's half-width t*se (t from
    the run's own df: n-1 paired, Welch's unpaired) is integrated over the chi-square laws of those
    estimates on a grid of equally likely points. A z in place of t, as before, overstated the power.
    `between_log_sd` adds a run-to-run variance 2*between**2, known (as `widen` uses it)."""
    floor = 2 * (between_log_sd or 0.0) ** 2
    if paired:
        within = (log_sd_a ** 2 + log_sd_b ** 2) / n_a
        hat = within * _chi2_grid(n_a - 1, 4096)  # the estimated within variance of the log ratio
        with np.errstate(divide="ignore"):  # no within noise at all: the known floor alone, df infinite
            df = (hat + floor) ** 2 / (hat ** 2 / (n_a - 1)) if floor else np.full_like(hat, n_a - 1.0)
    else:
        within_a, within_b = log_sd_a ** 2 / n_a, log_sd_b ** 2 / n_b
        hat_a = within_a * _chi2_grid(n_a - 1, 128)[:, None]
        hat_b = within_b * _chi2_grid(n_b - 1, 128)[None, :]
        hat = (hat_a + hat_b).ravel()
        den = (hat_a ** 2 / (n_a - 1) + hat_b ** 2 / (n_b - 1)).ravel()
        df = (hat + floor) ** 2 / np.where(den > 0, den, np.inf)
        within = within_a + within_b
    sigma = math.sqrt(within + floor)
    if sigma == 0:
        return lambda delta: 1.0 if delta > 0 else 0.0
    half = stats.t.ppf(1 - (1 - confidence) / 2, np.maximum(df, 1e-3)) * np.sqrt(hat + floor)
    return lambda delta: float(np.mean(special.ndtr((delta - half) / sigma) + special.ndtr((-delta - half) / sigma)))


@functools.lru_cache(maxsize=256)
def _chi2_grid(df: int, points: int) -> np.ndarray:
    """chi2(df)/df at `points` equally likely points (midpoints of its quantiles): an estimated variance
    over the true one."""
    return stats.chi2.ppf((np.arange(points) + 0.5) / points, df) / df


def rounds_for(change: float, log_sd_a: float | None, log_sd_b: float | None, paired: bool,
               confidence: float = DEFAULT_CONFIDENCE, between_log_sd: float | None = None,
               limit: int = 100_000) -> int | None:
    """Rounds a side (pairs when `paired`) that detect a relative change `change` with 80% power.

    With log sd σ a side, one pair's or two rounds' log ratio has variance 2σ² either way, so n of them
    2σ²/n: paired rounds need as many pairs as unpaired rounds a side, never half. The count is the
    least n whose power (`power`, t with the df of n rounds) reaches 80%, searched upward from the
    normal formula's n, which is a lower bound. `between_log_sd` adds the run-to-run floor that no
    number of rounds lowers: None when it alone hides the change."""
    sds = (log_sd_a, log_sd_b)
    if any(sd is None or not math.isfinite(sd) for sd in sds) or not math.isfinite(change) or change <= -1 \
            or change == 0:
        return None
    delta, floor = abs(math.log1p(change)), 2 * (between_log_sd or 0.0) ** 2
    z = stats.norm.ppf(1 - (1 - confidence) / 2) + stats.norm.ppf(POWER)
    if (delta / z) ** 2 <= floor:
        return None  # even infinitely many rounds leave the between-run noise
    n = max(2, math.floor((log_sd_a ** 2 + log_sd_b ** 2) / ((delta / z) ** 2 - floor)))
    while n <= limit:
        if power(change, n, n, log_sd_a, log_sd_b, paired, confidence, between_log_sd) >= POWER:
            return n
        n += 1
    return None


def _logs(values: Sequence[float | None]) -> list[float]:
    return [math.log(v) for v in values if _good(v)]


def _good(v: float | None) -> bool:
    """A round value that has a log: present, positive and finite (inf or NaN is a broken reading)."""
    return v is not None and math.isfinite(v) and v > 0


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
    widened = _decide(math.log(e.ratio), se, df, e.confidence, e.rounds_a, e.rounds_b, e.paired, e.log_sd,
                      e.log_sds)
    return replace(widened, covers=covers or f"{e.covers} and run-to-run variation",
                   between_log_sd=math.hypot(e.between_log_sd or 0.0, between_log_sd))


def _effect(a: Sequence[float | None], b: Sequence[float | None], confidence: float, paired: bool) -> Effect:
    if paired:
        pairs = [(math.log(x), math.log(y)) for x, y in zip(a, b) if _good(x) and _good(y)]
        diffs = [ly - lx for lx, ly in pairs]
        n = len(diffs)
        if n < 2:
            return _undecided(confidence, n, n, paired)
        mean, sd = _mean(diffs), _sd(diffs)
        se, df = sd / math.sqrt(n), n - 1
        if _no_noise(se, [v for p in pairs for v in p]):
            return _undecided(confidence, n, n, paired, _NO_NOISE.format(f"{n} pairs whose ratio"))
        return _decide(mean, se, df, confidence, n, n, paired, sd / math.sqrt(2), (sd / math.sqrt(2),) * 2)
    la, lb = _logs(a), _logs(b)
    if len(la) < 2 or len(lb) < 2:
        return _undecided(confidence, len(la), len(lb), paired)
    va, vb = _sd(la) ** 2, _sd(lb) ** 2
    se = math.sqrt(va / len(la) + vb / len(lb))
    if _no_noise(se, la + lb):
        return _undecided(confidence, len(la), len(lb), paired,
                          _NO_NOISE.format(f"{len(la)} vs {len(lb)} rounds whose value"))
    df = _welch_df(va, len(la), vb, len(lb))
    pooled = math.sqrt(((len(la) - 1) * va + (len(lb) - 1) * vb) / (len(la) + len(lb) - 2))
    return _decide(_mean(lb) - _mean(la), se, df, confidence, len(la), len(lb), paired, pooled,
                   (math.sqrt(va), math.sqrt(vb)))


_NO_NOISE = "no noise measured: {} never varies, so no interval can be trusted"


def _no_noise(se: float, logs: Sequence[float]) -> bool:
    """Rounds that do not vary (up to float rounding of their logs) measure no noise."""
    return se <= ZERO_NOISE * max(1.0, *(abs(v) for v in logs))


def _decide(diff: float, se: float, df: float, confidence: float, na: int, nb: int, paired: bool,
            log_sd: float, log_sds: tuple[float, float]) -> Effect:
    if not (math.isfinite(diff) and math.isfinite(se) and se > 0 and df > 0):  # never a NaN interval
        return _undecided(confidence, na, nb, paired, "no interval: the rounds give no finite spread")
    t = stats.t.ppf(1 - (1 - confidence) / 2, df)
    low, high = _exp(diff - t * se), _exp(diff + t * se)
    verdict: Verdict = "higher" if low > 1 else "lower" if high < 1 else "no detectable difference"
    return Effect(verdict, _exp(diff), low, high, confidence, na, nb, paired, log_sd, log_se=se, df=df,
                  log_sds=log_sds)


def _exp(x: float) -> float:
    """exp that reaches inf rather than raising: an interval wider than floats reach is still an interval."""
    return math.exp(x) if x < 709 else math.inf


def level_interval(values: Sequence[float | None], confidence: float = DEFAULT_CONFIDENCE
                   ) -> tuple[float, float, float] | None:
    """One figure's rounds alone: their geometric mean with a t-interval on the log values (the scale the
    effects use), or None under two good rounds."""
    found = mean_t_interval(_logs(values), confidence)
    if found is None:
        return None
    mean, low, high = found
    return math.exp(mean), math.exp(low), math.exp(high)


def _undecided(confidence: float, na: int, nb: int, paired: bool, reason: str | None = None) -> Effect:
    return Effect("not enough rounds", None, None, None, confidence, na, nb, paired, None,
                  reason=reason or f"{na} vs {nb} good rounds; 2 a side needed")


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


def ratio_interval(ratio: float, low: float, high: float, label: str = "CI", covers: str | None = None) -> str:
    """`1.21× (95% CI 1.10–1.33)`-style text: `label` goes before the bounds; `covers`, what variation the
    interval covers, after them (a reader takes a bare 95% interval to hold the next run's ratio)."""
    d = ratio_digits(low, high)
    return f"{ratio:.{d}f}× ({label} {low:.{d}f}–{high:.{d}f}" + (f", covering {covers})" if covers else ")")


def describe(e: Effect) -> str:
    """`1.21× (95% CI 1.10–1.33, covering round-to-round noise within one deployment of each engine)`, or
    the reason there is no interval."""
    if e.ratio is None or e.low is None or e.high is None:
        return f"not enough rounds ({e.reason or f'{e.rounds_a} vs {e.rounds_b} good rounds; 2 a side needed'})"
    return ratio_interval(e.ratio, e.low, e.high, f"{e.confidence:.0%} CI", e.covers)
