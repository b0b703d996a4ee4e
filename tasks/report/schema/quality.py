"""What the quality step found for one engine: accuracy per family with its Wilson interval, and the
items answered wrong (docs/PROTOCOL.md, "Answers")."""

from __future__ import annotations

from tasks.report.schema.base import Doc


class FamilyAccuracy(Doc):
    items: int
    correct: int
    accuracy: float
    low: float  # the Wilson interval of the accuracy, at `confidence`
    high: float
    confidence: float


class WrongAnswer(Doc):
    item_id: str
    family: str
    expected: str  # JSON text
    answer: str | None  # None: the request failed (`error`)
    error: str | None


class Quality(Doc):
    families: dict[str, FamilyAccuracy]
    wrong: list[WrongAnswer]
