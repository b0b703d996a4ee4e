"""What a step is and what it returns: a transaction over the run's state (tasks/state/documents.py) that takes
the run context (tasks/steps/context.py) and, for a per-engine step, the engine's name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from tasks.config import RunConfig
from tasks.steps.context import RunContext


class StepResult(BaseModel):
    """What a step did, as every caller receives it (an Airflow task returns it as its XCom)."""

    step: str
    engine: str | None = None
    status: Literal["ok", "skipped"] = "ok"
    detail: str = ""  # why it was skipped
    data: dict[str, Any] = Field(default_factory=dict)  # the step's own figures


StepFn = Callable[[RunContext, "str | None"], dict[str, Any]]


@dataclass(frozen=True)
class Step:
    name: str
    per_engine: bool
    run: StepFn
    enabled: Callable[[RunConfig], bool] = lambda cfg: True
    retries: int = 0  # Airflow retries: only for steps whose retry cannot lose or hide evidence
    scenario: bool = False  # a measured scenario: listed in the plan's matrix
    # A measurement is retried only after a try that ended without an outcome (its worker was killed):
    # a try that failed recorded its failure, and a retry would replace its rows, the evidence.
    retry_after_failure: bool = True
    required: bool = False  # a run-level step the run's verdict needs completed (tasks/steps/execution.py verdict)
    nightly_only: bool = False  # in dayone_nightly's graph alone; dayone_eval leaves it out
