"""The run-to-run variation of a figure, estimated from a lineage's own history (the nightly's).

One run's rounds share one launch of each engine, so their interval misses the variation between
launches; the lineage's earlier good runs hold it. A line is fitted through the runs' log means in time
order (a drift is what the reference comparison must catch, not noise), and the between-run variance is
what the residuals hold beyond the within-run part (method of moments, as in a one-way random-effects
ANOVA, k - 2 degrees of freedom for k runs):

    between_log_sd**2 = SSR / (k - 2) - mean_j(s_j**2 / n_j)   (floored at 0)

Fewer than MIN_RUNS runs with 2 good rounds each leave it unknown (None). PROTOCOL.md section 8,
"Regression verdicts" (run-to-run variation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIN_RUNS = 4  # a line through the run means leaves k - 2 degrees of freedom: 2 at the least
HISTORY_RUNS = 6  # the last good run and up to five before it: recent enough to be the same lineage


@dataclass(frozen=True)
class Between:
    log_sd: float  # sd of one run's log figure around the lineage's level (0 when the history shows none)
    df: float  # degrees of freedom of the estimate
    runs: int  # past runs it came from


def between_run_log_sd(runs: Sequence[Sequence[float]]) -> Between | None:
    """The between-run sd of a figure's log value from each past run's round values, oldest run first;
    None with fewer than MIN_RUNS runs of at least 2 positive, finite values."""
    means, within = [], []
    for values in runs:
        logs = [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
        if len(logs) < 2:
            continue
        m = sum(logs) / len(logs)
        means.append(m)
        within.append(sum((x - m) ** 2 for x in logs) / (len(logs) - 1) / len(logs))
    k = len(means)
    if k < MIN_RUNS:
        return None
    order = [float(j) for j in range(k)]
    x_mean, y_mean = sum(order) / k, sum(means) / k
    slope = (sum((x - x_mean) * (y - y_mean) for x, y in zip(order, means))
             / sum((x - x_mean) ** 2 for x in order))
    residual = sum((y - y_mean - slope * (x - x_mean)) ** 2 for x, y in zip(order, means)) / (k - 2)
    return Between(math.sqrt(max(0.0, residual - sum(within) / k)), float(k - 2), k)
