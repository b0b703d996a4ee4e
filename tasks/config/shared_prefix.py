"""The shared-prefix scenario's settings (PROTOCOL.md, "Shared prefix")."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tasks.config.base import ConfigModel, Fix, PositiveInt


class SharedPrefixScenario(ConfigModel):
    """Groups of requests sharing a system prompt of `prefix_tokens`, each with a distinct suffix
    (agent and RAG style), sent through the load client in rounds (tasks/scenarios/shared_prefix.py)."""

    enabled: bool = Field(False, description="Run groups of requests that share a prefix.")
    groups: Annotated[PositiveInt, Fix("give the number of prefix groups, an integer >= 1, e.g. 4")] = Field(
        4, description="Groups per round, each with its own shared prefix.")
    prefix_tokens: Annotated[PositiveInt, Fix("give the shared prefix length in tokens, e.g. 2048")] = Field(
        2048, description="Shared prefix (system prompt) length in tokens.")
    suffix_tokens: Annotated[PositiveInt, Fix("give each request's own suffix length in tokens, e.g. 128")] = Field(
        128, description="Each request's distinct suffix in tokens.")
    requests_per_group: Annotated[PositiveInt, Fix("give an integer >= 1, e.g. 8")] = Field(
        8, description="Requests per group per round.")
    output_tokens: Annotated[PositiveInt, Fix("give the output length in tokens, e.g. 64")] = Field(
        64, description="Output length in tokens (exact where the engine allows).")
    concurrency: Annotated[list[PositiveInt], Fix("give a list of integers >= 1, e.g. [1, 8]")] = Field(
        default_factory=lambda: [4], min_length=1, description="Concurrency levels, one round set each.")
    rounds: Annotated[PositiveInt, Fix("give an integer >= 1")] = Field(3, description="Rounds per level.")

    @property
    def input_tokens(self) -> int:
        return self.prefix_tokens + self.suffix_tokens

    @property
    def requests_per_round(self) -> int:
        return self.groups * self.requests_per_group

    def expected_reuse(self) -> float:
        """The share of a round's prompt tokens an exact prefix cache serves: every request of a group
        after its first reads the group's prefix (each round's prefixes are new, so its firsts are cold)."""
        reused = self.groups * (self.requests_per_group - 1) * self.prefix_tokens
        return reused / (self.requests_per_round * self.input_tokens)
