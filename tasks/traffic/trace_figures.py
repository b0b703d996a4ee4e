"""A replayed round's figures, gathered one request at a time into compact arrays (a million-row window
holds megabytes, not its rows): the rounds table's columns, as tasks/stats/figures.py round_figures computes
them, plus the schedule's lateness (sent - due)."""

from __future__ import annotations

import random
from array import array
from collections.abc import Mapping
from typing import Any

import numpy as np

from tasks.stats.figures import LATENCIES, PER_REQUEST_LATENCIES, meets_slo, sorted_percentile

ITL_KEPT = 1 << 20  # gaps kept for the ITL percentiles: every gap up to this many, a uniform sample past it


class ReplayFigures:
    def __init__(self, slo: Any = None, error_rate_max: float = 1.0, seed: str = "itl"):
        self.slo, self.error_rate_max = slo, error_rate_max
        self.pools = {lat: array("d") for lat in LATENCIES}
        self.lateness = array("d")
        self.ok = self.failed = self.out_tokens = self.good = self.deviations = 0
        self.first_send: float | None = None
        self.last_end: float | None = None
        self._gaps_seen = 0
        self._rng = random.Random(seed)

    def add(self, row: Mapping[str, Any], lateness_s: float) -> None:
        """One request's row (requests columns) and its lateness."""
        self.lateness.append(lateness_s)
        send = row.get("send_ts")
        if send is not None and (self.first_send is None or send < self.first_send):
            self.first_send = send
        self.deviations += bool(row.get("length_deviation"))
        if row.get("status") != "ok":
            self.failed += 1
            return
        self.ok += 1
        self.good += meets_slo(row, self.slo)
        self.out_tokens += row.get("completion_tokens") or 0
        if send is not None and row.get("e2e_s") is not None:
            end = send + row["e2e_s"]
            self.last_end = end if self.last_end is None else max(self.last_end, end)
        for lat in ("ttft", "tpot", "e2e"):
            value = row.get(f"{lat}_s")
            if value is not None:
                self.pools[lat].append(value)
        for gap in row.get("itl_s") or ():
            self._keep_gap(gap)

    def _keep_gap(self, gap: float) -> None:
        """Reservoir sampling: past ITL_KEPT gaps, each gap stays with probability ITL_KEPT / gaps seen."""
        self._gaps_seen += 1
        pool = self.pools["itl"]
        if len(pool) < ITL_KEPT:
            pool.append(gap)
            return
        j = self._rng.randrange(self._gaps_seen)
        if j < ITL_KEPT:
            pool[j] = gap

    def figures(self) -> dict[str, Any]:
        """The rounds-table figures of the requests added so far, and the lateness percentiles."""
        n = self.ok + self.failed
        duration = (self.last_end - self.first_send) if self.first_send is not None and self.last_end else None
        error_rate = self.failed / n if n else 0.0
        fig: dict[str, Any] = {
            "requests_ok": self.ok,
            "requests_failed": self.failed,
            "error_rate": error_rate,
            "status": "failed" if error_rate > self.error_rate_max or not self.ok else "ok",
            "duration_s": duration,
            "request_tps": self.ok / duration if duration else None,
            "output_tps": self.out_tokens / duration if duration else None,
        }
        for lat in LATENCIES:
            unbounded = self.failed if lat in PER_REQUEST_LATENCIES else 0  # failed requests count against the tail
            for name, value in summarize_array(self.pools[lat], unbounded).items():
                fig[f"{lat}_{name}_s"] = value
        fig["goodput_rps"] = self.good / duration if duration else None
        fig["length_deviations"] = self.deviations
        return fig

    def lateness_figures(self) -> dict[str, float | None]:
        s = summarize_array(self.lateness)
        return {"lateness_p50_s": s["p50"], "lateness_p99_s": s["p99"], "lateness_max_s": s["max"]}


def summarize_array(values: array, unbounded: int = 0) -> dict[str, float | None]:
    """tasks/stats/figures.py `summarize` (p50, p90, p95, p99 by linear interpolation, `unbounded` failed requests
    counted as larger than any value; max, mean) of an array of doubles, without a Python float per value: a
    million-request round's percentiles in megabytes."""
    xs = np.frombuffer(values, dtype=np.float64) if len(values) else np.empty(0)
    xs = np.sort(xs[~np.isnan(xs)])
    if not xs.size:
        return dict.fromkeys(("p50", "p90", "p95", "p99", "max", "mean"))
    p50, p90, p95, p99 = (sorted_percentile(xs, q, unbounded) for q in (50, 90, 95, 99))
    return {"p50": p50, "p90": p90, "p95": p95, "p99": p99, "max": float(xs[-1]), "mean": float(xs.mean())}
