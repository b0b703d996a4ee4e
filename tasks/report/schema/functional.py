"""What the functional checks and the needles found: each check's evidence, the long-context and
boundary needles."""

from __future__ import annotations

from tasks.report.schema.base import Doc


class CheckEvidence(Doc):
    outcome: str | None
    status: int | None
    field: str | None
    reason: str | None
    excerpt: str | None


class Needle(Doc):
    scenario: str
    target_tokens: int
    prompt_tokens: int | None
    depth: float
    attempt: int
    first_encounter: bool | None
    ttft_s: float | None
    e2e_s: float | None
    passed: bool
    status: str | None
    error: str | None
    expected: str | None
    answer: str | None


class Boundary(Doc):
    needles: list[Needle]
    restarts: CheckEvidence | None


class NeedleCount(Doc):
    passed: int
    total: int
