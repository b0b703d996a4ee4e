"""The run-level comparison of engines' answers and log-likelihoods: answer parity per pair and family,
greedy agreement, NLL per length and its findings (docs/PROTOCOL.md, "Answer parity", "Log-likelihood parity")."""

from __future__ import annotations

from pydantic import Field

from tasks.report.schema.base import Doc


class FamilyParity(Doc):
    a: str
    b: str
    family: str
    items: int  # items both engines were sent
    both_right: int
    only_a_right: list[str]  # item ids right on a and wrong on b
    only_b_right: list[str]
    neither_right: int
    # items wrong at first and right when asked again on a (b): unstable numerics, never counted as a change
    unstable_a: list[str] = Field(default_factory=list)
    unstable_b: list[str] = Field(default_factory=list)
    low: float  # the paired interval of accuracy(a) - accuracy(b), at `confidence`
    high: float
    confidence: float
    verdict: str  # "answers differ" or "no detectable difference"
    worse: str | None  # the engine whose answers are detectably worse


class GreedyAgreement(Doc):
    a: str
    b: str
    items: int  # items both answered
    identical: int
    identical_share: float
    first_divergence_chars: dict[str, int]  # item id -> where the two answers part
    median_first_divergence_chars: float | None


class NllPoint(Doc):
    engine: str
    length_tokens: int  # the text's target length
    prompt_tokens: int | None  # the tokens the engine scored
    mean_nll_nats: float | None  # mean negative log-likelihood per token (nats); None: not measured
    status: str  # ok, not_applicable or error
    reason: str | None


class NllFinding(Doc):
    engine: str
    length_tokens: int
    kind: str  # "gap" (above the other engines) or "depth" (rises with length where the others do not)
    text: str


class Parity(Doc):
    answers: list[FamilyParity] = Field(default_factory=list)
    agreement: list[GreedyAgreement] = Field(default_factory=list)
    nll: list[NllPoint] = Field(default_factory=list)
    nll_tolerance: float | None = None  # nats per token the engines may differ by
    nll_findings: list[NllFinding] = Field(default_factory=list)
    # Pairs whose answers and log-likelihood were not held against each other, and why (different weights).
    not_compared: list[str] = Field(default_factory=list)
