"""How a round's load is sent (client processes, streams per process) and how often each engine is started."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from tasks.config.base import ConfigModel, Fix, PositiveInt


class LoadSettings(ConfigModel):
    """The load client (tasks/load/shards.py): one event loop times about 25,000 token events/s well on a
    core (128 streams of 200 tokens/s); past that, a round's requests are spread over several client
    processes that start together. The default of 64 streams per process leaves a busy core room."""

    client_processes: Annotated[PositiveInt | Literal["auto"], Fix(
        "use auto (one process per streams_per_process streams, at most one per core this process may run on) "
        "or a whole number of processes >= 1")] = Field(
        "auto", description="Client processes per round: auto (one per streams_per_process streams of the round, "
                            "at most one per core this process may run on) or a fixed number.")
    streams_per_process: Annotated[PositiveInt, Fix(
        "give the streams one client process times, an integer >= 1 (64 keeps a core's stamps within a "
        "millisecond or so)")] = Field(
        64, description="Streams one client process takes with auto: the concurrency of a closed-loop round, or "
                        "the request count of an open-loop (rate) round, the most it can have in flight.")

    @field_validator("client_processes", mode="before")
    @classmethod
    def _processes(cls, v: Any) -> Any:
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return v
        raise ValueError(f"{v!r} is neither auto nor a whole number of processes >= 1")


class MeasurementSettings(ConfigModel):
    """How often each engine is started within the run (PROTOCOL.md section 8, "Launches")."""

    launches: Annotated[PositiveInt, Fix("give the starts per engine, an integer >= 1 (1: one deployment, "
                                         "as before)")] = Field(
        1, description="Starts of each engine per performance scenario: launch 0 is the deployment the run "
        "readied, launches 1.. are fresh deployments (teardown, deploy, readiness, warmup), each measuring every "
        "round of the scenario. With more than 1, a comparison's interval comes from the per-launch means, so it "
        "covers launch-to-launch variation, not only the rounds of one deployment.")
