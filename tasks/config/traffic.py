"""The trace scenario's section (`scenarios.trace`): where the trace lives, its format, the window replayed."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from tasks.config.base import ConfigModel, Fix, PositiveInt

TRACE_FORMATS = ("mooncake", "azure", "dayone")
# What to change when the client fell behind a trace (a round's lateness p99 over lateness_p99_max_s): every name
# is a setting of the run config (tests/verdicts/test_trace_client_behind.py resolves them).
BEHIND_FIX = ("Fix: spread the replay over more client processes (load.client_processes: auto takes one per "
              "load.streams_per_process requests of the window, at most one per free core; on a cluster also more "
              "runner pods, kubernetes.runner.max_pods and kubernetes.runner.cpu), or replay slower "
              "(scenarios.trace.speed)")


class SyntheticTrace(ConfigModel):
    """A Mooncake-format trace generated from a seed (tasks/traffic/trace_synth.py): the demo's and the tests'."""

    seed: int = Field(0, description="Seed: the same seed gives the same trace, byte for byte.")
    requests: Annotated[PositiveInt, Fix("give the rows to generate, an integer >= 1, e.g. 200")] = Field(
        200, description="Rows generated.")
    rate_rps: Annotated[float, Fix("give the mean arrival rate in requests per second, > 0, e.g. 10")] = Field(
        10.0, gt=0, allow_inf_nan=False, description="Mean arrival rate of the generated trace.")
    max_input_tokens: Annotated[PositiveInt, Fix("give a prompt length cap in tokens, below the model's limit")] = (
        Field(4096, description="Longest prompt generated (lengths are drawn log-normal and capped here)."))
    max_output_tokens: Annotated[PositiveInt, Fix("give an output length cap in tokens, e.g. 256")] = Field(
        256, description="Longest output generated.")


class TraceScenario(ConfigModel):
    """Replay a request trace: its arrival times (over `speed`), lengths and shared prefixes (PROTOCOL.md section 4)."""

    enabled: bool = Field(False, description="Replay the trace against each engine.")
    path: Annotated[str | None, Fix("give a file path readable where the load client runs (shipped in the "
                                    "runner image), or use s3_key or synthetic instead")] = Field(
        None, description="The trace as a file on the runner.")
    s3_key: Annotated[str | None, Fix("give the object's key in the archive bucket (or s3_bucket), reached "
                                      "through the dayone_s3 connection")] = Field(
        None, description="The trace as an S3 object of the run's store.")
    s3_bucket: str | None = Field(None, description="Bucket of s3_key; default the archive's bucket.")
    synthetic: SyntheticTrace | None = Field(None, description="Generate a Mooncake-format trace from a seed instead.")
    format: Annotated[Literal["mooncake", "azure", "dayone"],
                      Fix("use mooncake (JSONL: timestamp ms, input_length, output_length, hash_ids), azure (CSV: "
                          "TIMESTAMP, ContextTokens, GeneratedTokens) or dayone (JSONL: arrival_s, input_tokens, "
                          "output_tokens, block_ids)")] = Field("mooncake", description="The trace's format.")
    speed: Annotated[float, Fix("give a speed factor > 0: 2 replays twice as fast, 0.5 half as fast")] = Field(
        1.0, gt=0, allow_inf_nan=False, description="Arrivals at the trace's timestamps divided by this.")
    window_start_s: Annotated[float, Fix("give seconds >= 0 from the trace's first arrival")] = Field(
        0.0, ge=0, allow_inf_nan=False,
        description="Start of the window replayed, from the first arrival (trace time).")
    window_length_s: Annotated[float | None, Fix("give the window's length in seconds of trace time, > 0, "
                                                 "or null for the rest of the trace")] = Field(
        None, gt=0, allow_inf_nan=False, description="Length of the window replayed (trace time); null: to the end.")
    max_requests: Annotated[PositiveInt | None, Fix("give an integer >= 1, or null for every row of the window")] = (
        Field(None, description="At most this many rows of the window are replayed."))
    block_tokens: Annotated[PositiveInt, Fix("give the trace's block size in tokens (Mooncake's traces: 512)")] = (
        Field(512, description="Tokens per hash id (block) of the trace."))
    rounds: Annotated[PositiveInt, Fix("give an integer >= 1")] = Field(
        3, description="Times the window is replayed per engine; each round's prompts are new to the engine.")
    lateness_p99_max_s: Annotated[float, Fix("give seconds > 0, e.g. 0.010; a round over it is the client's, not "
                                             "the trace's: " + BEHIND_FIX[len("Fix: "):])] = Field(
        0.010, gt=0, allow_inf_nan=False,
        description="A round whose send lateness p99 (sent - due) exceeds this is flagged (the client fell behind) "
                    "and left out of the comparisons, the choice and the nightly, the reason shown.")
    seed: int = Field(0, description="Seed of the prompts' token IDs (with the run id and round).")

    @model_validator(mode="after")
    def _one_source(self) -> TraceScenario:
        given = [n for n in ("path", "s3_key", "synthetic") if getattr(self, n) is not None]
        if self.enabled and len(given) != 1:
            raise ValueError(
                f"{'none' if not given else ' and '.join(given)} given. Fix: give exactly one of path (a file on "
                "the runner), s3_key (an object of the run's S3 store) or synthetic ({seed, requests})")
        if self.synthetic is not None and self.format != "mooncake":
            raise ValueError(f"format: {self.format}, but a synthetic trace is in the mooncake format. "
                             "Fix: set format: mooncake, or give path or s3_key")
        return self

    def source_name(self) -> str:
        """The trace's source as the record names it (never a secret: a path, a key or a seed)."""
        if self.synthetic is not None:
            return f"synthetic seed={self.synthetic.seed} requests={self.synthetic.requests}"
        return f"s3 key {self.s3_key}" if self.s3_key else f"file {self.path}"
