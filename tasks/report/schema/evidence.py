"""What a run learned about an engine beside its figures: TTFT reliability, startup findings, the
revision it served, its restarts and its steps' outcomes."""

from __future__ import annotations

from pydantic import Field

from tasks.report.schema.base import Doc


class TtftVerdict(Doc):
    reliable: bool
    reason: str


class StartupFinding(Doc):
    finding: str | None
    severity: str | None
    line: str | None


class ServedRevision(Doc):
    """The model revision an engine served (tasks/evidence/revision.py `revision_identity`)."""

    configured: str | None
    moving: bool  # the configured revision is a branch or tag name, not a commit
    served: str | None  # the commit (or sha256 of the weights) the engine or target reported
    served_source: str | None
    reported_revision: str | None
    resolved: str | None = None  # the commit the pin step resolved a moving revision to, the engines started with
    asked: list[str] = Field(default_factory=list)  # the endpoints that answered
    identity: str | None
    model_path: str | None = None  # the path the engine says it loaded
    files_sha256: str | None = None  # of its config and tokenizer files, where DayOne could read them
    files_hashed: list[str] = Field(default_factory=list)  # which files that hash covers


class EngineMaturity(Doc):
    """How far the engine's support is along (tasks/config/maturity.py `engine_maturity`)."""

    maturity: str | None  # release, preview, nightly, dev; None: neither the config nor the image says
    source: str | None
    declared: str | None
    image: str | None  # what its image tag or version label says
    disagreement: str | None
    upstream: str | None  # the pull request or issue its support depends on


class StepRestarts(Doc):
    outcome: str | None
    reason: str | None
    restarts: int | None


class EngineRestarts(Doc):
    """Restarts over the run (tasks/evidence/restarts.py): `at_least` when /metrics alone saw one."""

    total: int
    at_least: bool
    restarted_steps: list[str]
    steps: dict[str, StepRestarts]


class OutcomeSummary(Doc):
    """A step's recorded outcome (tasks/state/documents.py StepOutcome), as published."""

    status: str | None
    detail: str | None


class TailCause(Doc):
    """A first-encounter or outlier round held against the engine's own log (tasks/evidence/engine_log.py)."""

    scenario: str
    level: str
    round: int
    launch: int
    warmup: bool
    first_encounter: bool
    tail_s: float  # its slowest request, send to last event
    cause: str  # compile, scheduler, compile and scheduler, or unknown
    line: str | None  # the first log line that coincides
    why: str
