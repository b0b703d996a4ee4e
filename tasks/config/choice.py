"""The purposes the decision summary picks an engine for, and the order each weighs the evidence in
(PROTOCOL.md, "The choice by purpose"). Answers and failed requests always come first: a broken engine
never wins on speed, whatever a purpose orders after them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from tasks.config.base import ConfigModel, Fix

# Weighed before every purpose's own order, in this order.
ALWAYS_FIRST = ("answers", "failed_requests")
Criterion = Literal["functional_checks", "maturity", "stability", "latency", "throughput", "capacity"]
CRITERIA: tuple[str, ...] = Criterion.__args__  # type: ignore[attr-defined]

# The Day-1 report's two purposes: a team's OpenAI-compatible service needs its API features and a calm
# start before speed; throughput research reads the speed first and keeps the rest as caveats.
BUILT_IN: dict[str, tuple[str, ...]] = {
    # maturity: the Day-1 report's deciding reason for production (a preview image whose upstream change was
    # not merged), read right after the checks so no speed can outrank it
    "production_api": ("functional_checks", "maturity", "stability", "latency", "throughput", "capacity"),
    "throughput_research": ("throughput", "capacity", "latency", "stability", "functional_checks"),
}
_CRITERIA_FIX = Fix("list criteria from functional_checks, maturity, stability, latency, throughput, capacity, "
                    "each once, most important first (answers and failed requests always come before them)")


class Purpose(ConfigModel):
    """A purpose of the team's own: its name and the order it weighs the criteria in."""

    name: Annotated[str, Fix("a short name of letters, digits, '_' or '-', e.g. batch_jobs")] = Field(
        pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,39}$", description="What the engine is for, as the report names it.")
    order: Annotated[list[Criterion], _CRITERIA_FIX] = Field(
        min_length=1, description="The criteria, most important first; an engine detectably worse than another on "
        "an earlier criterion is dropped before a later one is read.")

    @field_validator("order")
    @classmethod
    def _each_once(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"{v} names a criterion twice")
        return v


class ChoiceSettings(ConfigModel):
    purposes: Annotated[list[Purpose], Fix("name production_api or throughput_research, or give {name, order} for a "
                                           "purpose of your own")] = Field(
        default_factory=lambda: [Purpose(name=n, order=list(o)) for n, o in BUILT_IN.items()],
        description="The purposes the decision summary picks an engine for, each with the criteria it weighs most "
        "first: production_api (functional checks, maturity and stability before speed), throughput_research (speed "
        "first), or your own {name, order}; a built-in's name alone stands for it.")

    maturity_override: Annotated[str | None, Fix("give the reason in a sentence, or leave it out")] = Field(
        None, min_length=1, max_length=300, description="For this run only: maturity ranks no engine (a preview "
        "image is accepted for production); the reason given here is printed in the report beside the choice.")

    @field_validator("purposes", mode="before")
    @classmethod
    def _built_in_by_name(cls, v: object) -> object:
        if not isinstance(v, list):
            return v
        out = []
        for p in v:
            if isinstance(p, str):
                if p not in BUILT_IN:
                    raise ValueError(f"unknown purpose {p!r}. Fix: name one of {', '.join(BUILT_IN)}, or give "
                                     "{name, order} for a purpose of your own")
                p = {"name": p, "order": list(BUILT_IN[p])}
            out.append(p)
        return out

    @field_validator("purposes")
    @classmethod
    def _names_once(cls, v: list[Purpose]) -> list[Purpose]:
        names = [p.name for p in v]
        if len(set(names)) != len(names):
            raise ValueError(f"purposes {names} name one purpose twice")
        return v

    def orders(self) -> dict[str, tuple[str, ...]]:
        """Each purpose's name and its whole order, answers and failed requests first."""
        return {p.name: (*ALWAYS_FIRST, *p.order) for p in self.purposes}
