"""Power and coverage of effects (tasks/stats/effects.py) by simulation, vectorized with numpy.

Power: the rounds `rounds_needed` suggests, and the change `detectable` states, must be detected in
at least 75% of simulated runs (nominal 80%): a z where t is due, or paired rounds counted as half,
fall well below. Coverage across runs: with a launch effect per engine and run, the interval from
one run's rounds covers only round-to-round noise; launch means and `widen` cover the true ratio."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tasks.stats.effects import effect, widen

REPS = 20_000


def _decisions(a: np.ndarray, b: np.ndarray, paired: bool, confidence: float = 0.95):
    """Per simulated run (a row of log round values a side): the log ratio, its standard error and df,
    exactly as effect() computes them (paired t on the log ratios, else Welch)."""
    n_a, n_b = a.shape[1], b.shape[1]
    if paired:
        d = b - a
        return d.mean(1), d.std(1, ddof=1) / math.sqrt(n_a), np.full(len(d), n_a - 1.0)
    va, vb = a.var(1, ddof=1) / n_a, b.var(1, ddof=1) / n_b
    df = (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
    return b.mean(1) - a.mean(1), np.sqrt(va + vb), df


def _detected(change: float, n: int, log_sd: float, paired: bool, seed: int) -> float:
    """Share of simulated runs of n rounds a side (log sd `log_sd` each round) whose interval excludes 1."""
    rng = np.random.default_rng(seed)
    a = rng.normal(0.0, log_sd, (REPS, n))
    b = rng.normal(math.log1p(change), log_sd, (REPS, n))
    diff, se, df = _decisions(a, b, paired)
    t = stats.t.ppf(0.975, df)
    return float(np.mean((diff - t * se > 0) | (diff + t * se < 0)))


def _exact(n: int, log_sd: float, shift: float = 0.0) -> list[float]:
    """n round values whose logs have exactly mean `shift` and sd `log_sd`."""
    z = np.linspace(-1, 1, n)
    z = (z - z.mean()) / z.std(ddof=1)
    return list(100 * np.exp(shift + log_sd * z))


CASES = [(0.05, 0.05), (0.05, 0.03), (0.10, 0.05), (0.02, 0.02), (0.20, 0.10)]


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "unpaired"])
@pytest.mark.parametrize("change,log_sd", CASES)
def test_rounds_needed_reaches_80_percent_power(change, log_sd, paired):
    """A run whose rounds have log sd `log_sd` a side suggests n rounds for `change`; n rounds detect it.
    Paired rounds used to get half the count (9 pairs at 46% power for 5% at sd 0.05)."""
    if paired:  # pairs whose log ratios have sd √2·log_sd: independent round noise on each side
        pilot = effect(_exact(6, 0.0), _exact(6, log_sd * math.sqrt(2), 0.01), paired=True)
    else:
        pilot = effect(_exact(6, log_sd), _exact(6, log_sd, 0.01))
    assert pilot.log_sd == pytest.approx(log_sd)
    n = pilot.rounds_needed(change)
    power = _detected(change, n, log_sd, paired, seed=17)
    print(f"{'paired' if paired else 'unpaired'} {change:+.0%} at log sd {log_sd}: {n} rounds, power {power:.3f}")
    assert power >= 0.75
    assert _detected(change, n - 1, log_sd, paired, seed=18) < 0.8 or n == 2  # and no more than needed


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "unpaired"])
@pytest.mark.parametrize("n,log_sd", [(2, 0.05), (3, 0.05), (4, 0.02), (8, 0.1)])
def test_the_detectable_change_is_detected_with_80_percent_power(n, log_sd, paired):
    """`detectable` from a run whose rounds show exactly the true noise; at 2 pairs the t-quantile sum
    t(.975)+t(.8) detected its own figure in 73% of runs."""
    if paired:
        e = effect(_exact(n, 0.0), _exact(n, log_sd * math.sqrt(2), 0.01), paired=True)
    else:
        e = effect(_exact(n, log_sd), _exact(n, log_sd, 0.01))
    power = _detected(e.detectable, n, log_sd, paired, seed=23)
    print(f"{'paired' if paired else 'unpaired'} {n} rounds at log sd {log_sd}: detectable "
          f"±{e.detectable:.1%}, power {power:.3f}")
    assert power >= 0.75


def test_one_runs_interval_misses_the_next_launch_launch_means_and_widen_cover_it():
    """Two demo runs gave 1.22× (95% CI 1.16–1.29) then 1.41× (1.34–1.49): each run starts the engines
    anew, and its paired rounds share that one launch. Simulated: each run draws a launch effect per
    engine (log sd 0.05), then 5 interleaved rounds (log sd 0.02 each). The interval from one run's rounds
    covers the true ratio far below 95% across runs; the interval from 3 launches' means per engine, and
    the rounds' interval widened by the true between-launch sd, cover it at about 95%."""
    true_ratio, between, within, rounds, launches, runs = 1.2, 0.05, 0.02, 5, 3, 1500
    rng = np.random.default_rng(29)
    covered = {"rounds": 0, "launch means": 0, "widened": 0}
    for _ in range(runs):
        launch_a = rng.normal(0.0, between, launches)[:, None]  # one launch effect per engine and launch
        launch_b = rng.normal(math.log(true_ratio), between, launches)[:, None]
        a = 100 * np.exp(launch_a + rng.normal(0.0, within, (launches, rounds)))
        b = 100 * np.exp(launch_b + rng.normal(0.0, within, (launches, rounds)))
        one_run = effect(a[0], b[0], paired=True)  # what a run does today: the rounds of one launch
        means = effect(np.exp(np.log(a).mean(1)), np.exp(np.log(b).mean(1)),
                       covers=f"launch-to-launch variation over {launches} launches per engine")
        widened = widen(one_run, between)
        for name, e in (("rounds", one_run), ("launch means", means), ("widened", widened)):
            covered[name] += e.low <= true_ratio <= e.high
    share = {k: v / runs for k, v in covered.items()}
    print("coverage of the true ratio across runs:", {k: round(v, 3) for k, v in share.items()})
    assert share["rounds"] < 0.6  # nominally 95%, but of this launch's ratio, not the engines'
    assert share["launch means"] >= 0.9 and share["widened"] >= 0.9
    assert "launch-to-launch variation over 3 launches" in means.covers
    assert "run-to-run variation" in widened.covers and "within one deployment" in one_run.covers
