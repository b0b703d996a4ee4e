"""The capacity search's published result: the highest load that met the goodput target, with its probes."""

from __future__ import annotations

from typing import Literal

from tasks.report.schema.base import Doc


class CapacityProbe(Doc):
    """One load the capacity search probed (capacity table): its rounds' goodput share and interval."""

    probe: int
    phase: str  # bracket or bisect
    load: float  # concurrency, or req/s in mode rate
    rounds: int
    requests: int
    requests_good: int
    round_shares: list[float | None]
    goodput_share: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: Literal["pass", "fail"]
    close: bool  # the interval still held the target after the extra rounds: the point estimate decided


class Capacity(Doc):
    """The highest load whose goodput share met the target under the run's SLO (scenarios/capacity.py).
    `capacity` is None below start, and also when it is not published: judged on TTFT or TPOT for an
    engine whose stream timing is unreliable (`withheld` says why); the probes stay as measured."""

    mode: Literal["concurrency", "rate"]
    input_tokens: int
    output_tokens: int
    target_goodput_share: float
    confidence: float
    start: float
    max: float
    step: float
    outcome: Literal["found", "at_least_max", "below_start"]
    capacity: float | None
    bracket: list[float | None]  # [highest load that passed, lowest that failed]
    text: str
    probes: list[CapacityProbe]
    withheld: str | None = None
    engine_restarted: bool = False
