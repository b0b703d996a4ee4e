"""The scenarios a run measures and their sizes (PROTOCOL.md section 4)."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from tasks.config.base import ConfigModel, Fix, PositiveInt
from tasks.config.engines import IMAGE_PATTERN
from tasks.config.engines import _IMAGE_RE as IMAGE_RE
from tasks.config.openwebui import DEFAULT_IMAGE as OPENWEBUI_IMAGE
from tasks.config.sessions import SessionsScenario
from tasks.config.dataset import DatasetScenario
from tasks.config.shared_prefix import SharedPrefixScenario
from tasks.config.traffic import TraceScenario

Concurrencies = Annotated[list[PositiveInt], Fix("give a list of integers >= 1, e.g. [1, 4, 8]")]
Rounds = Annotated[PositiveInt, Fix("give an integer >= 1")]
Lengths = Annotated[list[PositiveInt],
                    Fix("keep every length below model.context_limit_tokens minus the output and template tokens")]


class PerfScenario(ConfigModel):
    enabled: bool = Field(True, description="Run this scenario.")
    input_tokens: PositiveInt = Field(..., description="Prompt length in tokens (exact: random token IDs).")
    output_tokens: PositiveInt = Field(..., description="Output length in tokens (exact where the engine allows).")
    concurrency: Concurrencies = Field(..., min_length=1, description="Concurrency levels, one round set each.")
    rounds: Rounds = Field(3, description="Measured rounds per concurrency level; the headline is their median.")
    requests_per_round: PositiveInt | None = Field(
        None, description="Requests per round; default 8 per unit of concurrency, at least 32."
    )

    @field_validator("concurrency")
    @classmethod
    def _non_empty(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("at least one concurrency level is needed")
        return v

    def requests_for(self, concurrency: int) -> int:
        return self.requests_per_round or max(8 * concurrency, 32)


class ShortScenario(PerfScenario):
    input_tokens: PositiveInt = Field(128, description="Prompt length in tokens.")
    output_tokens: PositiveInt = Field(64, description="Output length in tokens.")
    concurrency: Concurrencies = Field(default_factory=lambda: [1, 4, 8, 16, 32], min_length=1,
                                       description="Concurrency levels, one round set each.")


class PrefillScenario(PerfScenario):
    input_tokens: PositiveInt = Field(4096, description="Prompt length in tokens.")
    output_tokens: PositiveInt = Field(128, description="Output length in tokens.")
    concurrency: Concurrencies = Field(default_factory=lambda: [4], min_length=1,
                                       description="Concurrency levels, one round set each.")


class DecodeScenario(PerfScenario):
    input_tokens: PositiveInt = Field(128, description="Prompt length in tokens.")
    output_tokens: PositiveInt = Field(1024, description="Output length in tokens.")
    concurrency: Concurrencies = Field(default_factory=lambda: [1, 8], min_length=1,
                                       description="Concurrency levels, one round set each.")


class RateScenario(ConfigModel):
    enabled: bool = Field(False, description="Run Poisson arrivals at fixed request rates (for goodput).")
    input_tokens: PositiveInt = Field(128, description="Prompt length in tokens.")
    output_tokens: PositiveInt = Field(64, description="Output length in tokens.")
    rates: Annotated[list[Annotated[float, Field(gt=0)]], Fix("give request rates > 0 in requests per second")] = Field(
        default_factory=lambda: [1.0, 4.0], min_length=1, description="Request rates in requests per second.")
    rounds: Rounds = Field(3, description="Measured rounds per rate.")
    requests_per_round: PositiveInt = Field(32, description="Requests sent per round.")
    seed: int = Field(0, description="Seed of the arrival times, so two runs send on the same schedule.")


Load = Annotated[int | float, Field(gt=0, allow_inf_nan=False)]


class CapacityScenario(ConfigModel):
    """Capacity under SLO (tasks/scenarios/capacity.py): the highest load at which the goodput share
    stays at or above a target, found by doubling from `start` until a probe fails, then bisecting."""

    enabled: bool = Field(False, description="Search each engine's capacity under the run's SLO (needs an slo).")
    mode: Annotated[Literal["concurrency", "rate"],
                    Fix("use concurrency (closed loop) or rate (Poisson arrivals)")] = Field(
        "concurrency", description="The load searched: concurrent requests (closed loop), or Poisson arrivals "
                                   "in requests per second.")
    input_tokens: PositiveInt = Field(128, description="Prompt length in tokens.")
    output_tokens: PositiveInt = Field(64, description="Output length in tokens.")
    target_goodput_share: Annotated[float, Fix("give a fraction between 0 and 1, e.g. 0.9")] = Field(
        0.9, gt=0, lt=1, description="A load passes when at least this share of its requests complete within "
                                     "every SLO (goodput / requests sent).")
    start: Annotated[Load, Fix("give the first load: a concurrency >= 1, or a request rate > 0 with mode: rate")] = (
        Field(1, description="First load probed (concurrency, or req/s in mode rate)."))
    max: Annotated[Load, Fix("give the highest load to probe, at least start")] = Field(
        64, description="Highest load probed; a search that never fails reports 'at least max'.")
    step: Annotated[Load, Fix("give the resolution in load units, e.g. 1 (concurrent requests) or 0.5 (req/s)")] = (
        Field(1, description="Resolution in load units: the search stops when the load that passed and "
                             "the one that failed are at most this far apart."))
    resolution: Annotated[float,
                          Fix("give a fraction between 0 and 1 of the load, e.g. 0.1, or 0 for step alone")] = Field(
        0.0, ge=0, lt=1, description="Relative resolution: also stop when the two are within this fraction of "
                                     "the load that passed (0: step alone).")
    rounds: Rounds = Field(3, description="Measured rounds per probed load.")
    extra_rounds: Annotated[int, Fix("give an integer >= 0")] = Field(
        3, ge=0, description="Rounds added one at a time, at most this many, while the probe's goodput-share "
                             "interval holds the target.")
    confidence: Annotated[float, Fix("give a confidence between 0.5 and 1, e.g. 0.95")] = Field(
        0.95, gt=0.5, lt=1, description="Confidence of each probe's goodput-share interval.")
    requests_per_round: PositiveInt | None = Field(
        None, description="Requests per round; default 8 per unit of load (per concurrent request, or per "
                          "req/s: 8 s of arrivals), at least 32.")
    seed: int = Field(0, description="Seed of the arrival times (mode rate).")

    @model_validator(mode="after")
    def _loads(self) -> CapacityScenario:
        if self.mode == "concurrency":
            for name in ("start", "max", "step"):
                value = getattr(self, name)
                if float(value) != int(value):
                    raise ValueError(f"{name}: {value} is not a whole number of concurrent requests. "
                                     f"Fix: give an integer >= 1, or set mode: rate")
        if self.max < self.start:
            raise ValueError(f"max: {self.max} is below start {self.start}. Fix: give max >= start")
        return self

    def requests_for(self, load: float) -> int:
        return self.requests_per_round or max(math.ceil(8 * load), 32)


class LongContextScenario(ConfigModel):
    enabled: bool = Field(True, description="Run needle-in-a-haystack requests at long prompt lengths.")
    lengths: Lengths = Field(
        default_factory=lambda: [32_768, 131_072, 263_168, 524_288],
        description="Prompt lengths in tokens; each must fit the model limit minus output and template tokens.",
    )
    include_model_limit: bool = Field(True, description="Also run at the model limit minus output and template.")
    depths: Annotated[list[Annotated[float, Field(ge=0, le=1)]],
                      Fix("give fractions between 0 and 1, e.g. [0.1, 0.5, 0.9]")] = Field(
        default_factory=lambda: [0.1, 0.5, 0.9], description="Needle depths as fractions of the prompt (0 to 1)."
    )
    output_tokens: PositiveInt = Field(128, description="Output tokens per needle request.")
    prompt_style: Literal["chat", "completion"] = Field("chat", description="Send the haystack as chat or completion.")


class BoundaryScenario(ConfigModel):
    enabled: bool = Field(True, description="Send cold requests at lengths around a known risk; count restarts.")
    lengths: Lengths = Field(default_factory=lambda: [261_000, 263_000, 289_000],
                             description="Prompt lengths in tokens around the risk.")
    output_tokens: PositiveInt = Field(16, description="Output tokens per request.")


class PrefixCacheScenario(ConfigModel):
    enabled: bool = Field(True, description="One cold request after a cache clear, then exact repeats.")
    prompt_tokens: PositiveInt = Field(4400, description="Prompt length in tokens.")
    repeats: PositiveInt = Field(5, description="Hot repeats after the cold request.")
    output_tokens: PositiveInt = Field(16, description="Output tokens per request.")


class FunctionalScenario(ConfigModel):
    enabled: bool = Field(True, description="Run the functional checks (chat, streaming, tools, reasoning, ...).")
    skip: list[str] = Field(default_factory=list, description="Check names to skip (reported not_applicable).")

    @field_validator("skip")
    @classmethod
    def _known_checks(cls, v: list[str]) -> list[str]:
        if not v:
            return v
        from tasks.core.names import CHECK_NAMES  # here: loading tasks.checks loads the run config first

        unknown = [name for name in v if name not in CHECK_NAMES]
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}. Fix: use names from {', '.join(CHECK_NAMES)}")
        return v


class QualityScenario(ConfigModel):
    """Answers checked exactly (tasks/quality/): a task set generated from `seed`, sent at greedy decoding."""

    enabled: bool = Field(False, description="Send the generated task set and check every answer.")
    seed: int = Field(0, description="Seed of the task set: the same seed sends the same items to every engine.")
    items_per_family: Annotated[PositiveInt, Fix("give an integer >= 1, e.g. 8")] = Field(
        8, description="Items per family (kv_retrieval: per context length).")
    kv_context_tokens: Annotated[list[PositiveInt], Fix(
        "give lengths in tokens >= 1 below model.context_limit_tokens, e.g. [256, 1024, 4096]")] = Field(
        default_factory=lambda: [256, 1024, 4096], min_length=1,
        description="Approximate key-value table lengths in tokens for kv_retrieval.")
    max_tokens: Annotated[PositiveInt, Fix("give an integer >= 1, e.g. 64")] = Field(
        64, description="Output tokens per item: enough for the answer (a reasoning model needs more).")
    nll_lengths_tokens: Annotated[list[PositiveInt] | None, Fix(
        "give lengths in tokens >= 2 below model.context_limit_tokens, e.g. [256, 1024, 4096], or [] for none")] = Field(
        None, description="Lengths of the fixed text whose mean NLL per token each engine's prompt log-probabilities "
        "give (log-likelihood parity; a dialect without them records not_applicable). None: 256, 1024, 4096 and "
        "16384 tokens, those the model's context holds.")
    eval_set: Annotated[str | None, Fix("give s3://BUCKET/KEY.jsonl or a path to a JSONL file")] = Field(
        None, description="Your own eval set, scored as the family eval_set: a JSONL file, one item a line with "
        "prompt or messages, expected, and match exact, regex or numeric (with tolerance); checked at plan.")
    reask_wrong: bool = Field(True, description="Ask an item answered wrong (or failed) once more, the same request: "
        "greedy decoding gives the same answer unless the engine's numerics vary with the batch, so a change between "
        "engines or nights counts only where the re-ask is wrong too (an item right on re-ask is unstable, shown).")
    nll_tolerance: Annotated[float, Fix("give nats per token > 0, e.g. 0.05")] = Field(
        0.05, gt=0, description="Engines serving the same weights agree on the mean NLL per token within this many "
        "nats; a gap beyond it, or a rise with length beyond it on one engine only, is a finding.")


class OpenWebUIScenario(ConfigModel):
    """OpenWebUI in front of each engine, used as a person would (tasks/openwebui/)."""

    enabled: bool = Field(False, description="Start OpenWebUI against each engine: model list, a streamed "
                                             "multi-turn chat over its web app's socket, reasoning as a thought.")
    venv: Annotated[str | None, Fix("give the directory of OpenWebUI's virtual environment "
                                    "(`make openwebui-venv` builds one), or leave it out")] = Field(
        None, description="OpenWebUI's own virtual environment; default DAYONE_OPENWEBUI_VENV, else "
                          "the one `make openwebui-venv` builds.")
    image: Annotated[str, Fix("use NAME[:TAG] or REGISTRY/NAME[:TAG][@sha256:<64 hex>], e.g. "
                              "ghcr.io/open-webui/open-webui:v0.12.4")] = Field(
        OPENWEBUI_IMAGE, description="OpenWebUI's image on target=kubernetes, pinned to its digest by the pin "
                                     "step like the engines'; default: the version the local environment installs.",
        json_schema_extra={"pattern": IMAGE_PATTERN})

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not IMAGE_RE.match(v):
            raise ValueError(f"{v!r} is not a valid image reference")
        return v


# A reference a test answers: a URL (an upstream issue or pull request) or a short text (a recipe's name).
Cite = Annotated[str, Field(min_length=1, max_length=300)]


class Scenarios(ConfigModel):
    functional: FunctionalScenario = Field(FunctionalScenario(), description="Functional checks: pass, fail or n/a.")
    quality: QualityScenario = Field(QualityScenario(), description="Verifiable tasks: accuracy per family.")
    openwebui: OpenWebUIScenario = Field(OpenWebUIScenario(), description="OpenWebUI in front of each engine.")
    warmup: bool = Field(True, description="Warm every (input, output, concurrency) shape before measuring.")
    short: ShortScenario = Field(ShortScenario(), description="Short prompts and outputs over a concurrency sweep.")
    prefill: PrefillScenario = Field(PrefillScenario(), description="Long prompts, short outputs.")
    decode: DecodeScenario = Field(DecodeScenario(), description="Short prompts, long outputs.")
    rate: RateScenario = Field(RateScenario(), description="Poisson arrivals at fixed rates.")
    capacity: CapacityScenario = Field(
        CapacityScenario(), description="The highest load whose goodput share meets a target under the SLO.")
    long_context: LongContextScenario = Field(LongContextScenario(), description="Long-context TTFT and needles.")
    boundary: BoundaryScenario = Field(BoundaryScenario(), description="Cold requests around a length risk.")
    prefix_cache: PrefixCacheScenario = Field(PrefixCacheScenario(), description="Prefix cache cold vs hot.")
    trace: TraceScenario = Field(TraceScenario(), description="Replay a request trace (arrivals, lengths, prefixes).")
    sessions: SessionsScenario = Field(SessionsScenario(), description="Multi-turn chat sessions, measured per turn.")
    shared_prefix: SharedPrefixScenario = Field(
        SharedPrefixScenario(), description="Groups of requests sharing a prefix: expected reuse beside the hit rate.")
    dataset: DatasetScenario = Field(DatasetScenario(), description="Your own prompts or message lists, replayed.")
    cites: Annotated[dict[str, list[Cite]], Fix(
        "key a scenario (boundary) or a scenario's length (boundary.263000, long_context.131072), each with a list "
        "of URLs or short texts, e.g. {\"boundary.263000\": [\"https://github.com/ORG/REPO/issues/N\"]}",
        inside=True)] = Field(
        default_factory=dict, description="What a test answers: the upstream issue, pull request or recipe a "
        "scenario, or one of boundary's or long_context's lengths, comes from, shown in the report beside its "
        "result. Keys: a scenario name, or SCENARIO.LENGTH for a length it sends.")

    @model_validator(mode="after")
    def _cited_tests_exist(self) -> Scenarios:
        from tasks.core.names import SCENARIO_SWITCHES

        lengths = {"boundary": self.boundary.lengths, "long_context": self.long_context.lengths}
        for key in self.cites:
            scenario, _, length = key.partition(".")
            if scenario not in SCENARIO_SWITCHES:
                raise ValueError(f"cites: {key!r} names no scenario. Fix: key a scenario of "
                                 f"{', '.join(SCENARIO_SWITCHES)}, or boundary.LENGTH / long_context.LENGTH")
            if length and (scenario not in lengths or not length.isdigit() or int(length) not in lengths[scenario]):
                have = ", ".join(f"{scenario}.{n}" for n in lengths.get(scenario, []))
                raise ValueError(f"cites: {key!r} names no length that scenario sends. Fix: use one of "
                                 f"{have or 'the scenario alone'}")
        return self

