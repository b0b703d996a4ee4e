"""Speculative decoding off against on: pairs of engines that differ in it alone, the greedy answers it
made wrong (and those it changed, a diagnostic), and the on engine's acceptance with intervals (docs/PROTOCOL.md, "Speculative decoding off against on")."""

from __future__ import annotations

from pydantic import Field

from tasks.report.schema.base import Doc


class Acceptance(Doc):
    scenario: str
    level: str  # c=N or a rate
    rounds: int
    acceptance_rate: float  # accepted / drafted tokens, mean over rounds
    acceptance_rate_low: float | None  # its t-interval over rounds at `confidence`; None with one round
    acceptance_rate_high: float | None
    accepted_length: float | None  # tokens per verification step, bonus token included
    accepted_length_low: float | None
    accepted_length_high: float | None
    confidence: float


class OffOnPair(Doc):
    off: str
    on: str
    on_setting: str  # the switch as launched (e.g. the speculative arguments' value)
    items: int  # quality items checked: both sent, the off answer not empty
    # items right with it off and wrong with it on: the fault (at greedy decoding it must not make an answer wrong)
    wrong: list[str] = Field(default_factory=list)
    # a diagnostic: item id -> character where the greedy answers part (an answer still right is no fault)
    changed: dict[str, int] = Field(default_factory=dict)
    # items whose off answer was empty or failed (a reasoning model that spent its max_tokens): not checked
    not_checked: list[str] = Field(default_factory=list)
    acceptance: list[Acceptance] = Field(default_factory=list)  # of the on engine


class Speculative(Doc):
    pairs: list[OffOnPair]
