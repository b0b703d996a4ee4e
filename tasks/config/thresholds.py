"""The limits results are judged against: the SLO (goodput, capacity) and the nightly's regression thresholds."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tasks.config.base import ConfigModel, Fix


class SLO(ConfigModel):
    ttft_s: Annotated[float, Field(gt=0)] | None = Field(None, description="Goodput counts requests with TTFT at or below this (s).")
    tpot_s: Annotated[float, Field(gt=0)] | None = Field(None, description="... and TPOT at or below this (s).")
    e2e_s: Annotated[float, Field(gt=0)] | None = Field(None, description="... and end-to-end latency at or below this (s).")


class RegressionThresholds(ConfigModel):
    output_tps_drop: float = Field(0.10, ge=0, le=1, description="A drop of output throughput beyond this fraction is a regression.")
    ttft_p95_rise: float = Field(0.20, ge=0, description="A rise of P95 TTFT beyond this fraction is a regression.")
    failed_share_rise: float = Field(
        0.02, ge=0, le=1, description="A rise of the share of failed requests of a shape beyond this many share "
        "points (0.02: 2 in 100 requests more than the baseline's) is a regression, when the whole interval of the "
        "difference lies above it.")
    accuracy_drop: Annotated[float, Fix("give a share between 0 and 1, e.g. 0.0 (any detectable drop)")] = Field(
        0.0, ge=0, le=1, description="A drop of a quality family's accuracy beyond this many share points is a "
        "regression, when the whole interval of the difference lies below minus it. 0: the items are fixed, "
        "easy and answered greedily, so a sound engine answers them alike every night; any drop the interval "
        "detects is a fault.")
    confidence: float = Field(
        0.95, gt=0.5, lt=1, description="Confidence of the interval on the ratio new/baseline of round values: "
        "a regression only when the whole interval lies beyond the threshold, so jitter between rounds alone "
        "rarely fails a run.")
