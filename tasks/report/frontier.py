"""The throughput-latency frontier: for each load level of a scenario, an engine's output tokens/s per user
(1/TPOT) against its total output tokens/s (per GPU where the GPU count is known), each with an interval
over the level's rounds. Computed from the summary's levels alone; the report's chart draws it."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

from tasks.report.schema.perf import PerfLevel

CONFIDENCE = 0.95


@dataclass(frozen=True)
class FrontierPoint:
    label: str  # the level: c=N or N req/s
    total_tps: float  # output tokens/s of the whole engine (or per GPU), median over rounds
    total_interval: tuple[float, float] | None
    per_user_tps: float  # 1/TPOT: output tokens/s one stream sees, median over rounds
    per_user_interval: tuple[float, float] | None


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """A t interval of the mean of the round values (None with fewer than two)."""
    k = len(values)
    if k < 2:
        return None
    mean = statistics.fmean(values)
    half = float(stats.t.ppf(1 - (1 - confidence) / 2, k - 1)) * statistics.stdev(values) / math.sqrt(k)
    return mean - half, mean + half


def frontier_points(levels: Sequence[PerfLevel], gpus: int | None = None,
                    confidence: float = CONFIDENCE) -> list[FrontierPoint]:
    """One point per level whose rounds give both figures: each round's output_tps (over `gpus` where given)
    and 1/tpot_p50_s, the median of each and a t interval over the rounds. A level whose TPOT is not published
    (the TTFT rule withholds stream-timed figures) has no point."""
    out = []
    per = gpus if gpus else 1
    for lv in levels:
        tps = [v / per for v in _rounds(lv, "output_tps") if v > 0]
        per_user = [1 / v for v in _rounds(lv, "tpot_p50_s") if v > 0]
        if not tps or not per_user:
            continue
        out.append(FrontierPoint(lv.label, statistics.median(tps), t_interval(tps, confidence),
                                 statistics.median(per_user), t_interval(per_user, confidence)))
    return out


def _rounds(level: PerfLevel, figure: str) -> list[float]:
    f = level.figures.get(figure)
    return [] if f is None else [float(v) for v in f.rounds if v is not None]
