"""The multi-turn sessions scenario's settings (PROTOCOL.md, "Sessions")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from tasks.config.base import ConfigModel, Fix, PositiveInt


class SessionsScenario(ConfigModel):
    """Chat sessions of several turns: each turn sends the whole conversation so far (the engine's own
    answers included), then waits a think time before the next user message (tasks/scenarios/sessions.py)."""

    enabled: bool = Field(False, description="Run multi-turn chat sessions and measure each turn.")
    arrival: Annotated[Literal["fixed", "poisson"],
                       Fix("use fixed (a count of sessions, `concurrency` at a time) or poisson (sessions "
                           "start at `rates` per second)")] = Field(
        "fixed", description="How sessions start: a fixed count at each concurrency, or Poisson arrivals.")
    sessions: Annotated[PositiveInt, Fix("give the number of sessions per round, an integer >= 1, e.g. 8")] = Field(
        8, description="Sessions per round.")
    concurrency: Annotated[list[PositiveInt], Fix("give a list of integers >= 1, e.g. [1, 4]")] = Field(
        default_factory=lambda: [4], min_length=1,
        description="Sessions in flight at once (arrival fixed), one round set each.")
    rates: Annotated[list[Annotated[float, Field(gt=0)]],
                     Fix("give session arrival rates > 0 in sessions per second, e.g. [0.5, 2]")] = Field(
        default_factory=lambda: [1.0], min_length=1, description="Session arrivals per second (arrival poisson; unused with fixed).")
    turns: Annotated[PositiveInt, Fix("give the turns per session, an integer >= 1, e.g. 5")] = Field(
        5, description="Turns per session.")
    user_tokens: Annotated[PositiveInt, Fix("give the length of each user message in tokens, e.g. 64")] = Field(
        64, description="Length of each user message in tokens (calibrated where the engine tokenizes).")
    output_tokens: Annotated[PositiveInt, Fix("give the answer length in tokens, e.g. 64")] = Field(
        64, description="Answer length in tokens (forced where the engine allows).")
    think_time_s: Annotated[float, Field(ge=0, allow_inf_nan=False),
                            Fix("give the mean think time in seconds, >= 0, e.g. 1.0")] = Field(
        1.0, description="Mean wait between an answer and the next user message.")
    think_distribution: Annotated[Literal["exponential", "constant"],
                                  Fix("use exponential (seeded draws around the mean) or constant")] = Field(
        "exponential", description="How think times are drawn (seeded).")
    rounds: Annotated[PositiveInt, Fix("give an integer >= 1")] = Field(3, description="Rounds per level.")
    seed: int = Field(0, description="Seed of the messages, think times and arrivals: a rerun sends the same.")

    def longest_prompt_tokens(self) -> int:
        """The last turn's conversation: every user message and every answer before it (template excluded)."""
        return self.turns * self.user_tokens + (self.turns - 1) * self.output_tokens
