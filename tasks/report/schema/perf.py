"""A performance scenario's published results: per level, each figure's median over rounds with every
round's value, and the first-encounter tail beside it (PROTOCOL.md section 5)."""

from __future__ import annotations

from pydantic import Field

from tasks.stats.figures import FIRST_ENCOUNTER_FIGURES
from tasks.report.schema.base import Doc


class Figure(Doc):
    """One figure of a level: median over rounds, every round's value (None: round failed), spread flag."""

    median: float | None
    rounds: list[float | None]
    spread: bool


class FirstEncounter(Doc):
    """The first round of a level's shape on a server new to it, beside the steady medians."""

    round: int | None
    warmup: bool
    source: str
    ttft_p95_s: float | None = None
    ttft_p99_s: float | None = None
    e2e_p95_s: float | None = None
    e2e_p99_s: float | None = None

    def figure(self, name: str) -> float | None:
        """One of the four tail figures by name (None: not measured, or not published)."""
        return getattr(self, name) if name in FIRST_ENCOUNTER_FIGURES else None


class PerfLevel(Doc):
    label: str
    concurrency: int | None
    rate_rps: float | None
    rounds: list[int | None]
    # The engine's start each round ran on (measurement.launches), beside `rounds`; 0 throughout with one launch.
    launches: list[int | None] = Field(default_factory=list)
    round_status: list[str | None]
    first_encounter_rounds: list[int | None]
    # Beside `rounds`, a dataset round's cache state: emptied before it (true) or not (false: rows may have been
    # served from cache); empty for other scenarios. Rounds compare like with like (tasks/report/comparisons.py).
    cache_cleared: list[bool | None] = Field(default_factory=list)
    figures: dict[str, Figure]
    first_encounter: FirstEncounter | None
    rounds_failed: int
    requests_failed: int
    requests_ok: int = 0
    length_deviations: int

    def median(self, figure: str) -> float | None:
        f = self.figures.get(figure)
        return None if f is None else f.median


class ScenarioResults(Doc):
    """A performance scenario's published results for one engine: its levels, and how they were measured."""

    input_tokens: int
    output_tokens: int
    levels: list[PerfLevel]
    engine_restarted: bool = False  # the engine restarted during this step: its figures are flagged
    # The engines measured with this one, rounds alternating (ABBA): round n of each is a pair.
    interleaved_with: list[str] = Field(default_factory=list)
    launches: list[Launch] = Field(default_factory=list)  # the engine's starts this scenario measured


class Launch(Doc):
    """One start of an engine within a scenario (measurement.launches): 0 is the deployment the run readied."""

    launch: int
    ready_waited_s: float | None = None  # its readiness wait
