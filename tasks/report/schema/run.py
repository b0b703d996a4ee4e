"""The run-level parts of summary.json: validation, the scenario settings, what was not tested, the
decision's lines and the experiment's design."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tasks.report.schema.base import Doc


class Validation(Doc):
    ran: bool
    success: bool
    failed_tables: list[str]
    quarantined: bool | None


class Slo(Doc):
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None


class ScenarioSettings(Doc):
    enabled: dict[str, bool]
    warmup: bool
    rounds: dict[str, int]
    long_context_lengths: list[int]
    long_context_depths: list[float]
    prefix_cache_prompt_tokens: int
    prefix_cache_repeats: int
    slo: Slo
    # What each test answers: scenario or SCENARIO.LENGTH -> the upstream issues, pull requests or recipes
    cites: dict[str, list[str]] = Field(default_factory=dict)


class NotTested(Doc):
    engine: str
    what: str
    why: str


class DecisionLine(Doc):
    topic: Literal["leads", "reliability", "not_tested", "regressions"]
    text: str


class ChoiceReason(Doc):
    """One piece of evidence for or against an engine under a purpose (tasks/report/choice.py)."""

    engine: str
    stance: Literal["for", "against", "mixed"]  # mixed: better on some figures, worse on others
    criterion: str
    text: str
    section: str  # the report section that holds the evidence (its anchor)


class PurposeChoice(Doc):
    """The engine DayOne would pick for one purpose, and why: the criteria in the order weighed."""

    purpose: str
    order: list[str]
    picked: list[str]  # one engine, several the evidence could not tell apart, or none
    text: str
    reasons: list[ChoiceReason]


class Variant(Doc):
    """One engine of an experiment: the settings where it differs from the base."""

    engine: str
    changes: dict[str, Any]


class ExperimentSummary(Doc):
    """How the engines were compared: the base, the factors, each variant's diff, and the design run."""

    base: str
    factors: list[str]
    design: str  # factorial or one_at_a_time
    base_values: dict[str, Any]  # the base's value of every setting a variant changes
    variants: list[Variant]


class ResolvedRevision(Doc):
    """The model revision resolved to a commit before deploy (tasks/evidence/revision.py `resolve_revision`)."""

    configured: str | None
    commit: str | None  # what every engine was given; None: not resolved
    source: str | None  # where the commit was read
    why: str | None  # why it could not be resolved


class WeightsPair(Doc):
    """Two engines' served identities held against each other (tasks/evidence/revision.py `weights_pairs`)."""

    a: str
    b: str
    verdict: Literal["same", "differ", "declared", "unknown"]  # declared: a weights variant the config names
    text: str


class WarmupBucket(Doc):
    """One row of the warmup matrix a production deployment should run (tasks/scenarios/warmup.py)."""

    input_tokens: int
    output_tokens: int
    concurrency: int | None
    rate_rps: float | None
    requests: int
    sources: list[str]  # the scenarios whose traffic has this shape
