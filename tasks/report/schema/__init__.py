"""summary.json as typed models, a package by domain: the one document every reader of a run's results
goes through (PROTOCOL.md section 5). `read_summary` reads an archived summary.json and refuses another
schema version by name; a figure that is not published is None."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from tasks.report.schema.base import Doc
from tasks.report.schema.comparison import Comparison, Regression
from tasks.report.schema.engine import EngineSummary
from tasks.report.schema.evidence import OutcomeSummary
from tasks.report.schema.parity import Parity
from tasks.report.schema.speculative import Speculative
from tasks.report.schema.run import (DecisionLine, ExperimentSummary, NotTested, PurposeChoice, ResolvedRevision,
                                     ScenarioSettings, Validation, WarmupBucket, WeightsPair)

SCHEMA = "dayone.summary/2"


class SummaryVersionError(ValueError):
    """An archived summary.json of a schema version this code does not read."""


class RunSummary(Doc):
    """The whole of summary.json."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), validate_by_name=True,
                              validate_by_alias=True, serialize_by_alias=True)

    # "schema" in the JSON: the name would shadow BaseModel.schema here.
    schema_version: Literal["dayone.summary/2"] = Field(SCHEMA, alias="schema")
    run_id: str
    model: str
    model_revision: str | None
    target: str
    dry_run: bool
    validation_success: bool
    validation: Validation
    scenarios: ScenarioSettings
    engines: dict[str, EngineSummary]
    restarts: dict[str, int]  # per engine, for the report's header
    run_steps: dict[str, OutcomeSummary]
    regressions: list[Regression]
    # Baselines the nightly comparison could not use, each with what differs ("engine args [...] then, [...] now")
    baselines_skipped: list[str] = Field(default_factory=list)
    # Baselines compared although the weights may differ (a moving model revision, weights not identified)
    baseline_caveats: list[str] = Field(default_factory=list)
    limits: list[str]
    # What this run did not prove, from its config and results (tasks/report/limits.py `not_proved`).
    not_proved: list[str] = Field(default_factory=list)
    not_tested: list[NotTested]
    confidence: float  # of every interval in `comparisons`
    comparisons: list[Comparison]
    decision: list[DecisionLine]
    # The engine picked per purpose of the run config, evidence for and against (tasks/report/choice.py).
    choices: list[PurposeChoice] = Field(default_factory=list)
    # interleaved (engines up together, rounds alternating ABBA), randomized (one after another in an
    # order drawn per run), or lanes (engines sharing a node one after another in config order)
    measurement_design: str = "lanes"
    engine_order: list[list[str]] = Field(default_factory=list)  # the run's positions, as measured
    experiment: ExperimentSummary | None = None
    # Engines whose GPU slices overlap or that ran on different GPU products (tasks/telemetry/hardware.py).
    slice_findings: list[str] = Field(default_factory=list)
    # Engines' answers and log-likelihoods held against each other (tasks/report/parity.py); None: not run.
    parity: Parity | None = None
    # Speculative decoding off against on (tasks/report/speculative.py); None: no such pair in the run.
    speculative: Speculative | None = None
    # For this run only, maturity ranked no engine for production; the reason given (config choice.maturity_override).
    maturity_override: str | None = None
    # The model revision resolved to a commit before deploy; None: a summary of before it was resolved.
    resolved_revision: ResolvedRevision | None = None
    # Each pair of ready engines: did they serve the same weights (answers and NLL are compared only where so).
    same_weights: list[WeightsPair] = Field(default_factory=list)
    # Where the engines ran against each other: a shared node or not, the same GPU UUIDs or not, and when.
    fairness: list[str] = Field(default_factory=list)
    # The warmup a production deployment should run: every length bucket of the run's traffic, requests each.
    warmup_matrix: list[WarmupBucket] = Field(default_factory=list)


def read_summary(doc: Any) -> RunSummary:
    """A parsed summary.json as a RunSummary; SummaryVersionError names another schema version."""
    found = doc.get("schema") if isinstance(doc, dict) else None
    if found != SCHEMA:
        raise SummaryVersionError(f"summary.json of schema {found!r}; this DayOne reads {SCHEMA!r} only")
    return RunSummary.model_validate(doc)
