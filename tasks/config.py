"""The run config: one validated model that every entry point builds.

The trigger form, the CLI, the nightly DAG and backfills all call `parse_run_config`, so bad
input fails in one place, before anything is deployed, with one kind of message:
``<field path>: <what is wrong>. Fix: <what to do>``.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tasks.models import KNOWN_MODELS
from tasks.presets import PRESET_FIELD, PRESETS, is_preset, with_preset
from tasks.sim.profile import Profile

DIALECTS = ("sglang", "vllm", "llamacpp", "openai")
Dialect = Literal["sglang", "vllm", "llamacpp", "openai"]

# registry[:port]/path[:tag][@sha256:hex] -- the grammar of the OCI distribution reference.
_IMAGE_RE = re.compile(
    r"^(?:(?P<registry>[a-zA-Z0-9.-]+(?::[0-9]+)?)/)?"
    r"(?P<repository>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
_SLUG_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
_SETTING_PATTERN = r"^[a-z_]+(\.[A-Za-z0-9_.-]+)?$"  # a field of the engine spec, then a key within it
# The same grammar for JSON schema (ECMA-262 has no named groups), so the trigger form checks it too.
IMAGE_PATTERN = re.sub(r"\(\?P<\w+>", "(?:", _IMAGE_RE.pattern)

ReasoningFormat = Literal["none", "auto", "deepseek", "deepseek-legacy"]
FlashAttn = Literal["auto", "on", "off"]

# Hints shown after "Fix:"; keyed by the last component of the field path, or the last two
# ("llamacpp.model") where the last alone is ambiguous; "X.*" covers every field below X.
FIX_HINTS: dict[str, str] = {
    "image": "use NAME[:TAG] or REGISTRY/NAME[:TAG][@sha256:<64 hex>], e.g. lmsysorg/sglang:v0.5.0",
    "concurrency": "give a list of integers >= 1, e.g. [1, 4, 8]",
    "dialect": f"use one of {', '.join(DIALECTS)}",
    "target": "use 'local' (engine as a process on this machine) or 'kubernetes'",
    "lengths": "keep every length below model.context_limit_tokens minus the output and template tokens",
    "name": "use lowercase letters, digits and '-', at most 40 characters, starting with a letter or digit",
    "engines": "give at least one engine with distinct names",
    "rounds": "give an integer >= 1",
    "depths": "give fractions between 0 and 1, e.g. [0.1, 0.5, 0.9]",
    "rates": "give request rates > 0 in requests per second",
    "endpoint": "give the base URL of the running server, e.g. http://127.0.0.1:30000",
    "setting": "give a field of the engine spec, e.g. llamacpp.parallel, env.NAME, image or args",
    "levels": "give a list of the setting's values, e.g. [1, 4]",
    "base": "name one of the run's engines",
    "sim_profile.*": "give a value the simulator's Profile accepts (tasks/sim/profile.py)",
    "llamacpp.model": f"use one of {', '.join(KNOWN_MODELS)} or a GGUF file path",
    "llamacpp.ctx_size": "give the KV cache size in tokens, e.g. 4096",
    "llamacpp.parallel": "give the number of slots, an integer >= 1",
    "llamacpp.threads": "give a thread count >= 1 (default: the CPU count minus one)",
    "llamacpp.threads_batch": "give a thread count >= 1 (default: threads)",
    "llamacpp.batch_size": "give an integer >= 1",
    "llamacpp.ubatch_size": "give an integer >= 1, at most batch_size",
    "llamacpp.kv_unified": "give true or false",
    "llamacpp.cont_batching": "give true or false",
    "llamacpp.cache_prompt": "give true or false",
    "llamacpp.cache_ram_mib": "give MiB >= 0; 0 turns the host-RAM prompt cache off",
    "llamacpp.chat_template": "give a built-in template name such as chatml, or a Jinja template",
    "llamacpp.reasoning_format": f"use one of {', '.join(get_args(ReasoningFormat))}",
    "llamacpp.flash_attn": f"use one of {', '.join(get_args(FlashAttn))}",
    "llamacpp.temperature": "give a temperature >= 0, e.g. 0 for greedy decoding",
    "capacity.mode": "use concurrency (closed loop) or rate (Poisson arrivals)",
    "capacity.target_goodput_share": "give a fraction between 0 and 1, e.g. 0.9",
    "capacity.start": "give the first load: a concurrency >= 1, or a request rate > 0 with mode: rate",
    "capacity.max": "give the highest load to probe, at least start",
    "capacity.step": "give the resolution in load units, e.g. 1 (concurrent requests) or 0.5 (req/s)",
    "capacity.resolution": "give a fraction between 0 and 1 of the load, e.g. 0.1, or 0 for step alone",
    "capacity.extra_rounds": "give an integer >= 0",
    "capacity.confidence": "give a confidence between 0.5 and 1, e.g. 0.95",
    "load.client_processes": "use auto (one process per streams_per_process streams, at most one per core this "
                             "process may run on) or a whole number of processes >= 1",
    "api_key_connection": "name an Airflow connection whose password field holds the key",
    "api_key_secret.*": "give the Secret's name and key in the run's namespace, e.g. {name: vllm-key, key: api-key}",
    "tls_ca_bundle": "give the path of a PEM file with the CA that signed the endpoint's certificate",
    "measurement.launches": "give the starts per engine, an integer >= 1 (1: one deployment, as before)",
    "load.streams_per_process": "give the streams one client process times, an integer >= 1 (64 keeps a core's "
                                "stamps within a millisecond or so)",
}


class ConfigError(ValueError):
    """Invalid run config; `problems` holds (field path, message, fix) triples."""

    def __init__(self, problems: list[tuple[str, str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{f}: {m}. Fix: {x}" for f, m, x in problems))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


PositiveInt = Annotated[int, Field(ge=1)]


class ModelSpec(_Model):
    name: str = Field("dayone-sim-model", min_length=1, description="Served model name, as /v1/models lists it.")
    revision: str = Field("main", min_length=1, description="Model revision (commit or tag) recorded in the manifest.")
    context_limit_tokens: PositiveInt = Field(1_048_576, description="Model's context window in tokens.")
    template_overhead_tokens: int = Field(64, ge=0, description="Tokens the chat template adds around a prompt.")
    path: str | None = Field(None, description="Model files: a path in the pod's model volume, or a local GGUF file.")
    reasoning: bool | None = Field(
        None, description="Does the model reason? true: a reply without any reasoning fails reasoning_split; "
                          "false or null (unknown): no reasoning is not applicable.")


class LlamaCppSettings(_Model):
    """llama.cpp server settings for the llamacpp launcher (and the llamacpp dialect's container)."""

    # Strict like the server's own options: "4" or 1 for true is a mistake, not a number or a flag.
    model_config = ConfigDict(strict=True)

    model: str | None = Field(
        None, description=f"GGUF model: {', '.join(KNOWN_MODELS)} (tasks/models.py) or a file path; "
                          "default: model.path, else smollm2.")
    ctx_size: int = Field(4096, ge=256, description="KV cache size in tokens; with kv_unified every slot may use all.")
    parallel: int = Field(1, ge=1, description="Slots: requests decoded together (continuous batching).")
    threads: int | None = Field(
        None, ge=1, description="Decode threads; default (null): the CPU count minus one, one core left to the "
                                "load client.")
    threads_batch: int | None = Field(None, ge=1, description="Prompt-processing threads; default (null): threads.")
    batch_size: int = Field(2048, ge=1, description="Logical batch (n_batch).")
    ubatch_size: int = Field(512, ge=1, description="Physical batch (n_ubatch), at most batch_size.")
    kv_unified: bool = Field(True, description="One KV buffer shared by all slots (false: ctx_size / parallel each).")
    cont_batching: bool = Field(True, description="Continuous batching.")
    cache_prompt: bool = Field(True, description="Reuse a slot's KV for a shared prompt prefix.")
    cache_ram_mib: int = Field(
        0, ge=0, description="Host-RAM prompt cache in MiB; 0 so a slot erase really empties the caches.")
    chat_template: str = Field(
        "", description="A built-in template name (e.g. chatml) or a Jinja template; empty: the model's own.")
    reasoning_format: ReasoningFormat = Field("deepseek", description="How reasoning is split from the content.")
    flash_attn: FlashAttn = Field("auto", description="Flash attention.")
    temperature: float | None = Field(
        None, ge=0, description="Default sampling temperature of requests that set none; default (null): "
                                "llama.cpp's (0.8).")

    @model_validator(mode="after")
    def _batches(self) -> LlamaCppSettings:
        if self.ubatch_size > self.batch_size:
            raise ValueError(f"ubatch_size: {self.ubatch_size} is over batch_size {self.batch_size}. "
                             "Fix: give ubatch_size <= batch_size")
        return self

    def model_for(self, model: ModelSpec) -> str:
        """The model the server loads: this setting, else model.path, else SmolLM2."""
        return self.model or model.path or "smollm2"


class SecretKeyRef(_Model):
    name: str = Field(..., min_length=1, description="Kubernetes Secret in the run's namespace.")
    key: str = Field("api-key", min_length=1, description="The key within the Secret that holds the value.")


# Field names under which a key would sit inline in the config (which is archived): refused by name.
_INLINE_KEY_FIELDS = ("api_key", "apikey", "api_token", "token", "bearer_token", "authorization", "password")


class EngineSpec(_Model):
    name: str = Field(..., description="Engine name in tables and the archive, e.g. sglang or vllm-preview.",
                      json_schema_extra={"pattern": _SLUG_RE.pattern})
    dialect: Dialect = Field(..., description="API dialect, which picks the engine adapter.")
    image: str | None = Field(None, description="Image reference (tag or digest); required for target=kubernetes.",
                              json_schema_extra={"pattern": IMAGE_PATTERN})
    args: list[str] = Field(default_factory=list, description="Extra engine arguments, appended to the adapter's.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for the engine.")
    gpus: int = Field(1, ge=0, le=64, description="GPUs in the slice (nvidia.com/gpu).")
    tensor_parallel: PositiveInt | None = Field(None, description="Tensor parallel size; defaults to gpus.")
    node: str | None = Field(None, description="Node name for the slice; engines on one node run one after another.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node labels that place the slice.")
    launcher: Literal["sim", "llamacpp", "external"] = Field(
        "sim", description="For target=local: DayOne's simulator, llama.cpp's server, or an already running endpoint."
    )
    endpoint: str | None = Field(None, description="Base URL of an already running server (launcher=external).")
    # A free object in the form (the simulator's Profile is large); checked against it when parsed.
    sim_profile: dict[str, Any] = Field(
        default_factory=dict, description="Simulator profile overrides (launcher=sim), fields of the simulator's "
        "Profile (tasks/sim/profile.py), e.g. {\"startup_delay_s\": 1, \"slots\": 8}.")
    llamacpp: LlamaCppSettings | None = Field(
        None, title="llama.cpp settings",
        description="llama.cpp server settings (launcher=llamacpp; on kubernetes, dialect=llamacpp).")
    digest: str | None = Field(None, description="Pinned digest for backfills; overrides resolving the tag.",
                               json_schema_extra={"pattern": r"^sha256:[a-f0-9]{64}$"})
    ready_timeout_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        None, description="Readiness wait for this engine in seconds; default: kubernetes.startup_timeout_s on a "
        "cluster, 120 s plus the simulator's startup delay locally."
    )
    api_key_connection: str | None = Field(
        None, min_length=1, description="Airflow connection whose password is the engine's API key (sent as "
        "Authorization: Bearer on every request); the key itself is never in the config.")
    api_key_secret: SecretKeyRef | None = Field(
        None, description="Kubernetes Secret (name, key) in the run's namespace holding the engine's API key.")
    tls_ca_bundle: str | None = Field(
        None, min_length=1, description="PEM file of the CA that signed an https endpoint's certificate (an internal CA).")
    tls_verify: bool = Field(True, description="Check an https endpoint's certificate; false skips the check.")

    @model_validator(mode="before")
    @classmethod
    def _no_inline_key(cls, data: Any) -> Any:
        """A key in the config would be archived with it: refused with the field that holds it."""
        if not isinstance(data, dict):
            return data
        for name in _INLINE_KEY_FIELDS:
            if data.get(name):
                raise ValueError(f"{name}: an API key is never given in the run config (the config is archived). "
                                 "Fix: put the key in an Airflow connection's password and name it in "
                                 "api_key_connection, or in a Kubernetes Secret named by api_key_secret")
        args = data.get("args")
        if isinstance(args, list):
            for i, a in enumerate(args):
                value = str(a).split("=", 1)[1] if str(a).startswith("--api-key=") else (
                    str(args[i + 1]) if a == "--api-key" and i + 1 < len(args) else None)
                if value and not value.startswith("$("):
                    raise ValueError(f"args[{i}]: --api-key with a literal key would be archived with the config. "
                                     "Fix: pass it from the engine's environment, e.g. --api-key $(API_KEY), and "
                                     "name the key's source in api_key_connection or api_key_secret")
        return data

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not _SLUG_RE.match(v):
            raise ValueError(f"{v!r} is not a valid engine name")
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        if v is not None and not _IMAGE_RE.match(v):
            raise ValueError(f"{v!r} is not a valid image reference")
        return v

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"sha256:[a-f0-9]{64}", v):
            raise ValueError(f"{v!r} is not a sha256 digest")
        return v

    @field_validator("sim_profile")
    @classmethod
    def _sim_profile(cls, v: dict[str, Any]) -> dict[str, Any]:
        # Kept as given (the launcher merges it over the run's model); its errors carry their field paths.
        Profile.model_validate(v)
        return v

    @model_validator(mode="after")
    def _launcher_fields(self) -> EngineSpec:
        if self.launcher == "external" and not self.endpoint:
            raise ValueError("endpoint: required when launcher is 'external'")
        if self.api_key_connection and self.api_key_secret is not None:
            raise ValueError("api_key_secret: the key has one source, and api_key_connection names another. "
                             "Fix: keep one of api_key_connection and api_key_secret")
        if self.sim_profile and self.launcher != "sim":
            raise ValueError(f"sim_profile: only the simulator reads it, and launcher is {self.launcher!r}. "
                             "Fix: remove sim_profile, or set launcher: sim")
        return self

    @property
    def tp(self) -> int:
        return self.tensor_parallel or max(self.gpus, 1)

    @property
    def llamacpp_settings(self) -> LlamaCppSettings:
        """The llama.cpp settings given, with their defaults."""
        return self.llamacpp or LlamaCppSettings()


class PerfScenario(_Model):
    enabled: bool = Field(True, description="Run this scenario.")
    input_tokens: PositiveInt = Field(..., description="Prompt length in tokens (exact: random token IDs).")
    output_tokens: PositiveInt = Field(..., description="Output length in tokens (exact where the engine allows).")
    concurrency: list[PositiveInt] = Field(..., min_length=1, description="Concurrency levels, one round set each.")
    rounds: PositiveInt = Field(3, description="Measured rounds per concurrency level; the headline is their median.")
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
    concurrency: list[PositiveInt] = Field(default_factory=lambda: [1, 4, 8, 16, 32], min_length=1,
                                           description="Concurrency levels, one round set each.")


class PrefillScenario(PerfScenario):
    input_tokens: PositiveInt = Field(4096, description="Prompt length in tokens.")
    output_tokens: PositiveInt = Field(128, description="Output length in tokens.")
    concurrency: list[PositiveInt] = Field(default_factory=lambda: [4], min_length=1,
                                           description="Concurrency levels, one round set each.")


class DecodeScenario(PerfScenario):
    input_tokens: PositiveInt = Field(128, description="Prompt length in tokens.")
    output_tokens: PositiveInt = Field(1024, description="Output length in tokens.")
    concurrency: list[PositiveInt] = Field(default_factory=lambda: [1, 8], min_length=1,
                                           description="Concurrency levels, one round set each.")


class RateScenario(_Model):
    enabled: bool = Field(False, description="Run Poisson arrivals at fixed request rates (for goodput).")
    input_tokens: PositiveInt = Field(128, description="Prompt length in tokens.")
    output_tokens: PositiveInt = Field(64, description="Output length in tokens.")
    rates: list[Annotated[float, Field(gt=0)]] = Field(default_factory=lambda: [1.0, 4.0], min_length=1,
                                                       description="Request rates in requests per second.")
    rounds: PositiveInt = Field(3, description="Measured rounds per rate.")
    requests_per_round: PositiveInt = Field(32, description="Requests sent per round.")
    seed: int = Field(0, description="Seed of the arrival times, so two runs send on the same schedule.")


Load = Annotated[int | float, Field(gt=0, allow_inf_nan=False)]


class CapacityScenario(_Model):
    """Capacity under SLO (tasks/scenarios/capacity.py): the highest load at which the goodput share
    stays at or above a target, found by doubling from `start` until a probe fails, then bisecting."""

    enabled: bool = Field(False, description="Search each engine's capacity under the run's SLO (needs an slo).")
    mode: Literal["concurrency", "rate"] = Field(
        "concurrency", description="The load searched: concurrent requests (closed loop), or Poisson arrivals "
                                   "in requests per second.")
    input_tokens: PositiveInt = Field(128, description="Prompt length in tokens.")
    output_tokens: PositiveInt = Field(64, description="Output length in tokens.")
    target_goodput_share: float = Field(
        0.9, gt=0, lt=1, description="A load passes when at least this share of its requests complete within "
                                     "every SLO (goodput / requests sent).")
    start: Load = Field(1, description="First load probed (concurrency, or req/s in mode rate).")
    max: Load = Field(64, description="Highest load probed; a search that never fails reports 'at least max'.")
    step: Load = Field(1, description="Resolution in load units: the search stops when the load that passed and "
                                      "the one that failed are at most this far apart.")
    resolution: float = Field(
        0.0, ge=0, lt=1, description="Relative resolution: also stop when the two are within this fraction of "
                                     "the load that passed (0: step alone).")
    rounds: PositiveInt = Field(3, description="Measured rounds per probed load.")
    extra_rounds: int = Field(
        3, ge=0, description="Rounds added one at a time, at most this many, while the probe's goodput-share "
                             "interval holds the target.")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Confidence of each probe's goodput-share interval.")
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


class LongContextScenario(_Model):
    enabled: bool = Field(True, description="Run needle-in-a-haystack requests at long prompt lengths.")
    lengths: list[PositiveInt] = Field(
        default_factory=lambda: [32_768, 131_072, 263_168, 524_288],
        description="Prompt lengths in tokens; each must fit the model limit minus output and template tokens.",
    )
    include_model_limit: bool = Field(True, description="Also run at the model limit minus output and template.")
    depths: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: [0.1, 0.5, 0.9], description="Needle depths as fractions of the prompt (0 to 1)."
    )
    output_tokens: PositiveInt = Field(128, description="Output tokens per needle request.")
    prompt_style: Literal["chat", "completion"] = Field("chat", description="Send the haystack as chat or completion.")


class BoundaryScenario(_Model):
    enabled: bool = Field(True, description="Send cold requests at lengths around a known risk; count restarts.")
    lengths: list[PositiveInt] = Field(default_factory=lambda: [261_000, 263_000, 289_000],
                                       description="Prompt lengths in tokens around the risk.")
    output_tokens: PositiveInt = Field(16, description="Output tokens per request.")


class PrefixCacheScenario(_Model):
    enabled: bool = Field(True, description="One cold request after a cache clear, then exact repeats.")
    prompt_tokens: PositiveInt = Field(4400, description="Prompt length in tokens.")
    repeats: PositiveInt = Field(5, description="Hot repeats after the cold request.")
    output_tokens: PositiveInt = Field(16, description="Output tokens per request.")


class FunctionalScenario(_Model):
    enabled: bool = Field(True, description="Run the functional checks (chat, streaming, tools, reasoning, ...).")
    skip: list[str] = Field(default_factory=list, description="Check names to skip (reported not_applicable).")


class Scenarios(_Model):
    functional: FunctionalScenario = Field(FunctionalScenario(), description="Functional checks: pass, fail or n/a.")
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


class SLO(_Model):
    ttft_s: Annotated[float, Field(gt=0)] | None = Field(None, description="Goodput counts requests with TTFT at or below this (s).")
    tpot_s: Annotated[float, Field(gt=0)] | None = Field(None, description="... and TPOT at or below this (s).")
    e2e_s: Annotated[float, Field(gt=0)] | None = Field(None, description="... and end-to-end latency at or below this (s).")


class LoadSettings(_Model):
    """The load client (tasks/load/shards.py): one event loop times about 25,000 token events/s well on a
    core (128 streams of 200 tokens/s); past that, a round's requests are spread over several client
    processes that start together. The default of 64 streams per process leaves a busy core room."""

    client_processes: PositiveInt | Literal["auto"] = Field(
        "auto", description="Client processes per round: auto (one per streams_per_process streams of the round, "
                            "at most one per core this process may run on) or a fixed number.")
    streams_per_process: PositiveInt = Field(
        64, description="Streams one client process takes with auto: the concurrency of a closed-loop round, or "
                        "the request count of an open-loop (rate) round, the most it can have in flight.")

    @field_validator("client_processes", mode="before")
    @classmethod
    def _processes(cls, v: Any) -> Any:
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return v
        raise ValueError(f"{v!r} is neither auto nor a whole number of processes >= 1")


class MeasurementSettings(_Model):
    """How often each engine is started within the run (PROTOCOL.md section 8, "Launches")."""

    launches: PositiveInt = Field(
        1, description="Starts of each engine per performance scenario: launch 0 is the deployment the run "
        "readied, launches 1.. are fresh deployments (teardown, deploy, readiness, warmup), each measuring every "
        "round of the scenario. With more than 1, a comparison's interval comes from the per-launch means, so it "
        "covers launch-to-launch variation, not only the rounds of one deployment.")


class EngineTelemetry(_Model):
    dcgm_url: str | None = Field(None, description="This engine's GPUs: its node's DCGM exporter, e.g. "
                                 "http://NODE:9400/metrics, or a Prometheus /federate URL selecting DCGM_FI_DEV_*.")
    gpu_uuids: list[str] | None = Field(None, description="The engine's GPUs among those the exporter reports; "
                                        "default: the GPUs its hardware record names, else all the exporter reports.")


class TelemetrySettings(_Model):
    """GPU telemetry per round from a DCGM exporter (tasks/evidence/telemetry.py): utilization, memory,
    power and the energy counter, for joules per output token."""

    enabled: bool = Field(False, description="Read each engine's GPUs during every measured round.")
    dcgm_url: str | None = Field(
        None, description="DCGM exporter (or Prometheus /federate) URL for every engine without one of its own; "
        "a local simulator without either is read at its own DCGM-style exporter.")
    interval_s: Annotated[float, Field(gt=0, le=60, allow_inf_nan=False)] = Field(
        0.5, description="Seconds between readings while a round runs.")
    engines: dict[str, EngineTelemetry] = Field(
        default_factory=dict, description="Per engine name: its own DCGM URL and GPU UUIDs (each engine has its GPUs).")

    def endpoint(self, spec: EngineSpec) -> tuple[str | None, tuple[str, ...] | None]:
        """(URL, GPU UUIDs) of an engine; URL None: the local simulator's own exporter."""
        own = self.engines.get(spec.name) or EngineTelemetry()
        uuids = tuple(own.gpu_uuids) if own.gpu_uuids else None
        return own.dcgm_url or self.dcgm_url, uuids

    def check(self, engines: list[EngineSpec], target: str) -> None:
        names = {e.name for e in engines}
        for name in self.engines:
            if name not in names:
                raise ValueError(f"telemetry.engines.{name}: no such engine. Fix: use one of {sorted(names)}")
        if not self.enabled:
            return
        for e in engines:
            simulated = target == "local" and e.launcher == "sim"
            if self.endpoint(e)[0] is None and not simulated:
                raise ValueError(f"telemetry.dcgm_url: engine {e.name} has no DCGM endpoint. Fix: set "
                                 f"telemetry.dcgm_url or telemetry.engines.{e.name}.dcgm_url, or telemetry.enabled: false")


class KubernetesSettings(_Model):
    namespace: str = Field("dayone", description="Namespace of the engine pods and services.")
    conn_id: str = Field("kubernetes_default", description="Airflow connection of the cluster.")
    startup_timeout_s: PositiveInt = Field(1800, description="Readiness wait, covering a cold start.")
    registry_conn_id: str | None = Field(None, description="Airflow connection with registry credentials.")
    model_volume_claim: str | None = Field(None, description="PVC holding the model weights.")
    model_mount_path: str = Field("/models", description="Where the model volume is mounted in the pod.")
    service_account: str = Field("dayone-engine", description="Service account of the engine pods.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="Pod tolerations, e.g. for GPU taints.")
    cleanup_age_s: PositiveInt = Field(6 * 3600, description="Cleanup removes DayOne objects older than this.")
    run_as_user: int | None = Field(
        1000, ge=0, description="UID of engine containers (non-root); None keeps the image's own user (often root)."
    )


class ArchiveSettings(_Model):
    bucket: str = Field("dayone", min_length=3, description="S3 bucket of the archive and the digest catalog.")
    prefix: str = Field("runs", description="Key prefix of archived runs in the bucket.")
    conn_id: str = Field("dayone_s3", description="Airflow connection: login/password and endpoint_url in extra.")


class RegressionThresholds(_Model):
    output_tps_drop: float = Field(0.10, ge=0, le=1, description="A drop of output throughput beyond this fraction is a regression.")
    ttft_p95_rise: float = Field(0.20, ge=0, description="A rise of P95 TTFT beyond this fraction is a regression.")
    failed_share_rise: float = Field(
        0.02, ge=0, le=1, description="A rise of the share of failed requests of a shape beyond this many share "
        "points (0.02: 2 in 100 requests more than the baseline's) is a regression, when the whole interval of the "
        "difference lies above it.")
    confidence: float = Field(
        0.95, gt=0.5, lt=1, description="Confidence of the interval on the ratio new/baseline of round values: "
        "a regression only when the whole interval lies beyond the threshold, so jitter between rounds alone "
        "rarely fails a run.")


class Factor(_Model):
    setting: str = Field(..., min_length=1, description="A setting of the engine spec: image, args, gpus, env.NAME, "
                         "llamacpp.parallel, sim_profile.slots, ...", json_schema_extra={"pattern": _SETTING_PATTERN})
    levels: list[Any] | None = Field(
        None, description="The setting's values; the base engine's own value is added when missing. Leave out "
                          "when the variants are written in engines by hand.")

    @field_validator("setting")
    @classmethod
    def _known_setting(cls, v: str) -> str:
        root = v.split(".")[0]
        if not re.fullmatch(_SETTING_PATTERN, v) or root not in EngineSpec.model_fields or root == "name":
            raise ValueError(f"{v!r} is not a setting of an engine")
        return v


class Experiment(_Model):
    """A base engine and the settings it varies (tasks/experiment.py); every other difference is refused."""

    base: str = Field(..., description="Name of the base engine in engines: the reference of every effect.")
    factors: list[Factor] = Field(..., min_length=1, description="Settings varied, each with its levels.")
    design: Literal["factorial", "one_at_a_time"] = Field(
        "factorial", description="factorial: every combination of levels; one_at_a_time: each level of one "
                                 "factor with the others at the base's values (the seed's one switch at a time).")
    order: Literal["auto", "interleaved", "randomized"] = Field(
        "auto", description="interleaved: variants up together, rounds alternate ABBA; randomized: one variant "
                            "after another in an order drawn per run; auto: interleaved where the variants can be "
                            "up together (local processes, distinct nodes).")
    allow_differences: list[str] = Field(
        default_factory=list, description="Settings that may differ between variants though not factors "
                                          "(e.g. node), recorded in the manifest.")

    @property
    def expands(self) -> bool:
        return all(f.levels is not None for f in self.factors)


class RunConfig(_Model):
    run_id: str | None = Field(None, description="Set by the pipeline; letters, digits, '-', '_', '.'.")
    model: ModelSpec = Field(ModelSpec(), title="Model", description="The model every engine serves: name (as "
                             "/v1/models lists it), revision, context window in tokens.")
    engines: list[EngineSpec] = Field(
        default_factory=lambda: [EngineSpec(name="sim-sglang", dialect="sglang")], min_length=1, title="Engines",
        description="Engines to evaluate, one JSON object each: name, dialect (sglang, vllm, llamacpp, openai), "
                    "image (on Kubernetes), engine args, GPUs, node; launcher sim, llamacpp or external on this machine.",
    )
    scenarios: Scenarios = Field(Scenarios(), title="Scenarios and their sizes", description="Each scenario's "
                                 "switch (enabled), prompt and output lengths in tokens, concurrency levels, rounds "
                                 "(PROTOCOL.md section 4).")
    slo: SLO = Field(SLO(), title="Service level objectives (SLO)", description="Goodput counts requests within "
                     "these latencies, in seconds: time to first token (ttft_s), per output token (tpot_s), end to "
                     "end (e2e_s); null: no such limit.")
    target: Literal["local", "kubernetes"] = Field(
        "local", title="Where engines run",
        description="local: processes on this machine; kubernetes: pods in the cluster of the Kubernetes settings."
    )
    dry_run: bool = Field(False, title="Dry run", description="Render and check everything, deploy nothing "
                          "(where engines run: kubernetes).")
    # finite: an infinite timeout would let a stalled stream hold its round forever
    request_timeout_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        600.0, title="Request timeout (seconds)", description="How long one request may take before it counts as failed.")
    round_error_rate_max: float = Field(0.05, ge=0, le=1, title="Highest error rate of a round (0 to 1)",
                                        description="A round whose share of failed requests is above this fails "
                                                    "(0.05: 5 in 100).")
    step_failed_share_max: float = Field(
        0.5, ge=0, le=1, title="Highest failed share of a step (0 to 1)",
        description="A performance step whose measured requests failed above this share fails "
        "(its rows are kept).")
    load: LoadSettings = Field(LoadSettings(), title="Load client", description="How many client processes "
                               "share a round's requests, and streams per process.")
    measurement: MeasurementSettings = Field(
        MeasurementSettings(), title="Launches per engine",
        description="Replicated launches: each engine started k times within the run (launches).")
    telemetry: TelemetrySettings = Field(TelemetrySettings(), title="GPU telemetry",
                                         description="GPU power and use per round, from a DCGM exporter.")
    kubernetes: KubernetesSettings = Field(KubernetesSettings(), title="Kubernetes cluster settings",
                                           description="Namespace, Airflow connection, readiness wait in seconds, "
                                                       "model volume (where engines run: kubernetes).")
    archive: ArchiveSettings = Field(ArchiveSettings(), title="Archive (S3)",
                                     description="The bucket and Airflow connection the run is archived to.")
    thresholds: RegressionThresholds = Field(RegressionThresholds(), title="Regression thresholds (nightly)",
                                             description="How far a value may move against the last good run before "
                                                         "the nightly calls it a regression (fractions: 0.10 is 10%).")
    experiment: Experiment | None = Field(
        None, title="Experiment (optional)", description="A single-variable A/B or factor sweep over a base engine "
        "(tasks/experiment.py): base, factors with their levels. Empty ({}): no experiment.")

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", v):
            raise ValueError(f"{v!r} is not a valid run id")
        return v

    @model_validator(mode="before")
    @classmethod
    def _expand_experiment(cls, data: Any) -> Any:
        """Add the experiment's variants to engines (idempotent: a dumped config validates to itself)."""
        exp = data.get("experiment") if isinstance(data, dict) else None
        if not isinstance(exp, dict) or not isinstance(data.get("engines"), list):
            return data
        factors = exp.get("factors")
        if not isinstance(factors, list) or not factors or not all(
                isinstance(f, dict) and isinstance(f.get("levels"), list)
                and str(f.get("setting")).split(".")[0] in EngineSpec.model_fields for f in factors):
            return data  # hand-written variants (or a malformed experiment, which validation names)
        engines = [e for e in data["engines"] if isinstance(e, dict)]
        base = next((e for e in engines if e.get("name") == exp.get("base")), None)
        if base is None:
            return data  # the after-check names the missing base
        try:
            base_spec = EngineSpec.model_validate(base)
        except ValidationError:
            return data  # the base's own errors are reported at engines[i]
        from tasks.experiment import effective, expand

        taken = {str(e.get("name")) for e in engines}
        pairs = [(str(f.get("setting")), f["levels"]) for f in factors]
        variants = expand(base, effective(base_spec), pairs, exp.get("design") == "one_at_a_time", set())
        out = list(data["engines"])
        for i, (doc, changes) in enumerate(variants):
            if doc["name"] in taken:
                continue  # expanded before (a dumped config) or written by hand: the diff check judges it
            try:
                EngineSpec.model_validate(doc)
            except ValidationError as exc:
                err = exc.errors(include_url=False)[0]
                i, j = _factor_level(pairs, changes)
                raise ValueError(f"experiment.factors[{i}].levels[{j}]: {pairs[i][1][j]!r} makes an invalid engine "
                                 f"({_path(tuple(err['loc']))}: {err['msg'].removeprefix('Value error, ')}). "
                                 f"Fix: give a value that {_path(tuple(err['loc']))} accepts") from None
            out.append(doc)
        return {**data, "engines": out}

    @model_validator(mode="after")
    def _cross_checks(self) -> RunConfig:
        names = [e.name for e in self.engines]
        if len(set(names)) != len(names):
            raise ValueError("engines: engine names must be distinct")
        if self.experiment is not None:
            self._experiment_checks(self.experiment)
        if self.target == "kubernetes":
            for i, e in enumerate(self.engines):
                if not e.image:
                    raise ValueError(f"engines[{i}].image: required when target is kubernetes")
        for i, e in enumerate(self.engines):
            self._llamacpp_checks(i, e)
        self.telemetry.check(self.engines, self.target)
        limit = self.usable_context_tokens(self.scenarios.long_context.output_tokens)
        for i, n in enumerate(self.scenarios.long_context.lengths):
            if self.scenarios.long_context.enabled and n > limit:
                raise ValueError(
                    f"scenarios.long_context.lengths[{i}]: {n} is over the model limit "
                    f"({self.model.context_limit_tokens} minus output and template = {limit})"
                )
        blimit = self.usable_context_tokens(self.scenarios.boundary.output_tokens)
        for i, n in enumerate(self.scenarios.boundary.lengths):
            if self.scenarios.boundary.enabled and n > blimit:
                raise ValueError(
                    f"scenarios.boundary.lengths[{i}]: {n} is over the model limit "
                    f"({self.model.context_limit_tokens} minus output and template = {blimit})"
                )
        return self

    def _experiment_checks(self, exp: Experiment) -> None:
        from tasks.experiment import covers, undeclared

        if exp.base not in {e.name for e in self.engines}:
            raise ValueError(f"experiment.base: {exp.base!r} is not an engine of the run. "
                             f"Fix: name one of engines ({', '.join(e.name for e in self.engines)})")
        if not exp.expands and any(f.levels is not None for f in exp.factors):
            raise ValueError("experiment.factors: some factors have levels and some not. Fix: give levels to every "
                             "factor (DayOne makes the variants), or to none (the variants are written in engines)")
        settings = [f.setting for f in exp.factors]
        for i, s in enumerate(settings):
            if any(covers(t, s) or covers(s, t) for t in settings[:i]):
                raise ValueError(f"experiment.factors[{i}].setting: {s!r} overlaps another factor. "
                                 "Fix: vary each setting in one factor")
        base = self.engine(exp.base)
        for i, e in enumerate(self.engines):
            if e.name == exp.base:
                continue
            extra = undeclared(base, e, [*settings, *exp.allow_differences])
            if extra:
                path, (a, b) = next(iter(extra.items()))
                raise ValueError(
                    f"engines[{i}].{path}: {e.name} differs from the base {exp.base} in {path} ({a!r} vs {b!r}), "
                    f"which is not a factor of the experiment. Fix: declare it in experiment.factors, make it equal, "
                    f"or list it in experiment.allow_differences")

    def _llamacpp_checks(self, i: int, e: EngineSpec) -> None:
        """Who reads engines[i].llamacpp depends on the target: the llamacpp launcher on this
        machine, the llamacpp dialect's container command on a cluster."""
        given = e.llamacpp is not None and e.llamacpp.model_fields_set  # {} is "nothing given"
        if self.target == "kubernetes":
            if given and e.dialect != "llamacpp":
                raise ValueError(f"engines[{i}].llamacpp: only the llamacpp dialect reads it, and dialect is "
                                 f"{e.dialect!r}. Fix: remove llamacpp, or set dialect: llamacpp")
            return
        if e.launcher != "llamacpp":
            if given:
                raise ValueError(f"engines[{i}].llamacpp: only the llamacpp launcher reads it, and launcher is "
                                 f"{e.launcher!r}. Fix: remove llamacpp, or set launcher: llamacpp")
            return
        if e.args:
            raise ValueError(f"engines[{i}].args: the llamacpp launcher takes no command-line arguments. "
                             f"Fix: put settings in engines[{i}].llamacpp ({', '.join(LlamaCppSettings.model_fields)})")
        settings = e.llamacpp_settings
        known = KNOWN_MODELS.get(settings.model_for(self.model))
        if known and settings.ctx_size > known.context_limit_tokens:
            limit = known.context_limit_tokens
            raise ValueError(f"engines[{i}].llamacpp.ctx_size: {settings.ctx_size} is over {known.name}'s trained "
                             f"context {limit}. Fix: give ctx_size <= {limit}")

    @model_validator(mode="after")
    def _capacity_needs_slo(self) -> RunConfig:
        if self.scenarios.capacity.enabled and not any(self.slo.model_dump().values()):
            raise ValueError("scenarios.capacity.enabled: capacity is judged against the run's SLO, and none is "
                             "set. Fix: set slo.ttft_s, slo.tpot_s and/or slo.e2e_s, or disable the capacity search")
        return self

    def usable_context_tokens(self, output_tokens: int) -> int:
        return self.model.context_limit_tokens - output_tokens - self.model.template_overhead_tokens

    def engine(self, name: str) -> EngineSpec:
        for e in self.engines:
            if e.name == name:
                return e
        raise KeyError(f"engine {name!r} is not in the run config (have: {', '.join(x.name for x in self.engines)})")


def _factor_level(factors: list[tuple[str, list[Any]]], changes: dict[str, Any]) -> tuple[int, int]:
    """Which factor and level made a variant invalid: the last change (the others made valid variants
    before, or are the only one)."""
    for i in reversed(range(len(factors))):
        setting, levels = factors[i]
        if setting in changes:
            return i, levels.index(changes[setting])
    return 0, 0


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "config"


def _fix_for(path: str) -> str:
    parts = re.sub(r"\[\d+\]", "", path).split(".")
    for key in (".".join(parts[-2:]), parts[-1], *(f"{p}.*" for p in parts[:-1])):
        if key in FIX_HINTS:
            return FIX_HINTS[key]
    return "see this field's description in the trigger form (or its Field in tasks/config.py)"


# Sections whose field names an unknown-field fix lists (what a typo there was likely meant to be).
_LISTED_FIELDS = {"llamacpp": LlamaCppSettings.model_fields, "sim_profile": Profile.model_fields}


def _unknown_fix(path: str) -> str:
    parent = re.sub(r"\[\d+\]", "", path).split(".")[-2:-1]
    known = _LISTED_FIELDS.get(parent[0]) if parent else None
    return "remove it or check its spelling" + (f" (known: {', '.join(known)})" if known else "")


def parse_run_config(data: dict[str, Any] | None) -> RunConfig:
    """Validate a run config dict; raise ConfigError naming every bad field and its fix."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([("config", f"expected an object, got {type(data).__name__}", "pass a JSON object")])
    if PRESET_FIELD in data:  # a named starting point under the fields given (tasks/presets.py)
        if not is_preset(data[PRESET_FIELD]):
            raise ConfigError([(PRESET_FIELD, f"unknown preset {data[PRESET_FIELD]!r}",
                                f"use one of {', '.join(PRESETS)}")])
        data = with_preset(data, RunConfig().model_dump(mode="json"))
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            path = _path(tuple(err["loc"]))
            if err["type"] == "extra_forbidden":
                problems.append((path, "unknown field", _unknown_fix(path)))
                continue
            msg = err["msg"].removeprefix("Value error, ")
            fix = None
            if err["type"] in ("model_type", "dict_type", "model_attributes_type"):
                # e.g. the form's text box turned an engine into a string: the fix is the shape, not the field
                fix = ('give each engine as a JSON object, e.g. {"name": "sim-a", "dialect": "sglang"}'
                       if path.startswith("engines[") else "give a JSON object with this section's fields")
            elif err["type"] == "value_error":
                # A model's own check names its field (relative to the model) and may say the fix.
                m = re.match(r"^([A-Za-z_][\w.\[\]]*): (.*)$", msg, re.S)
                if m:
                    field, msg = m.groups()
                    if path == "config":
                        path = field
                    elif not path.endswith(field):
                        path = f"{path}.{field}"
                msg, _, fix = msg.partition(". Fix: ")
            problems.append((path, msg, fix or _fix_for(path)))
        raise ConfigError(problems) from None


def read_config_file(path: str) -> dict[str, Any]:
    """A run config from a YAML or JSON file; an unreadable or malformed file is a ConfigError."""
    import yaml  # only the CLI entry points read files

    try:
        with open(path, encoding="utf-8") as fh:
            config = yaml.safe_load(fh)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([("--config", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}",
                            "give the path of a YAML or JSON run config file")]) from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError([("--config", f"{path} is not valid YAML or JSON ({first})", "fix the file's syntax")]) from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError([("config", f"{path} holds a {type(config).__name__}, not a mapping of run config fields",
                            "give an object, e.g. {engines: [{name: sim-a, dialect: sglang}]}")])
    return config
