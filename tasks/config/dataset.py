"""The dataset scenario's settings (`scenarios.dataset`, PROTOCOL.md "Your own prompts"): the user's own
prompts or message lists, from a file on the runner or an object of the run's S3 store."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from tasks.config.base import ConfigModel, Fix, PositiveInt


class DatasetScenario(ConfigModel):
    """A JSONL dataset replayed as it is written, closed loop or at Poisson rates, in rounds
    (tasks/scenarios/dataset.py); its lengths are the engine's usage."""

    enabled: bool = Field(False, description="Replay your own prompts against each engine.")
    path: Annotated[str | None, Fix("give a file path readable where the load client runs (shipped in the "
                                    "runner image), or use s3_key instead")] = Field(
        None, description="The dataset as a JSONL file on the runner.")
    s3_key: Annotated[str | None, Fix("give the object's key in the archive bucket (or s3_bucket), reached "
                                      "through the dayone_s3 connection")] = Field(
        None, description="The dataset as a JSONL object of the run's S3 store.")
    s3_bucket: str | None = Field(None, description="Bucket of s3_key; default the archive's bucket.")
    max_requests: Annotated[PositiveInt | None, Fix("give an integer >= 1, or null for every row")] = Field(
        None, description="At most this many rows (the first ones) are sent per round.")
    max_tokens: Annotated[PositiveInt, Fix("give an output length in tokens, e.g. 128")] = Field(
        128, description="Output length of a row without its own max_tokens (forced where the engine allows).")
    arrival: Annotated[Literal["closed", "poisson"],
                       Fix("use closed (`concurrency` users, each sending its next row when answered) or "
                           "poisson (rows sent at `rates` per second, seeded)")] = Field(
        "closed", description="Closed loop (N users in flight) or open loop at Poisson rates.")
    concurrency: Annotated[list[PositiveInt], Fix("give a list of integers >= 1, e.g. [1, 8]")] = Field(
        default_factory=lambda: [4], min_length=1, description="Users in flight (arrival closed), one round set each.")
    rates: Annotated[list[Annotated[float, Field(gt=0)]],
                     Fix("give arrival rates > 0 in requests per second, e.g. [2, 8]")] = Field(
        default_factory=lambda: [2.0], min_length=1, description="Arrivals per second (arrival poisson).")
    rounds: Annotated[PositiveInt, Fix("give an integer >= 1 (3 or more: the first is a first encounter)")] = Field(
        3, description="Times the dataset is sent per level; the prefix cache is emptied before each where the "
                       "engine can.")
    seed: int = Field(0, description="Seed of the Poisson arrivals (with the level and round).")

    @model_validator(mode="after")
    def _one_source(self) -> DatasetScenario:
        given = [n for n in ("path", "s3_key") if getattr(self, n) is not None]
        if self.enabled and len(given) != 1:
            raise ValueError(f"{'none' if not given else ' and '.join(given)} given. Fix: give exactly one of "
                             "path (a JSONL file on the runner) or s3_key (an object of the run's S3 store)")
        return self

    def source_name(self) -> str:
        """The dataset's source as the record names it (a path or a key, never a secret)."""
        return f"s3 key {self.s3_key}" if self.s3_key else f"file {self.path}"
