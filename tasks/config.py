"""The run config: one validated model that every entry point builds.

The trigger form, the CLI, the nightly DAG and backfills all call `parse_run_config`, so bad
input fails in one place, before anything is deployed, with one kind of message:
``<field path>: <what is wrong>. Fix: <what to do>``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

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

# Hints shown after "Fix:"; keyed by the last component of the field path.
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


class EngineSpec(_Model):
    name: str = Field(..., description="Engine name in tables and the archive, e.g. sglang or vllm-preview.")
    dialect: Dialect = Field(..., description="API dialect, which picks the engine adapter.")
    image: str | None = Field(None, description="Image reference (tag or digest); required for target=kubernetes.")
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
    sim_profile: dict[str, Any] = Field(default_factory=dict, description="Simulator profile overrides (launcher=sim).")
    llamacpp: dict[str, Any] = Field(default_factory=dict, description="llama.cpp server settings (launcher=llamacpp).")
    digest: str | None = Field(None, description="Pinned digest for backfills; overrides resolving the tag.")
    ready_timeout_s: Annotated[float, Field(gt=0)] | None = Field(
        None, description="Readiness wait for this engine in seconds; default: kubernetes.startup_timeout_s on a "
        "cluster, 120 s plus the simulator's startup delay locally."
    )

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

    @property
    def tp(self) -> int:
        return self.tensor_parallel or max(self.gpus, 1)


class PerfScenario(_Model):
    enabled: bool = True
    input_tokens: PositiveInt
    output_tokens: PositiveInt
    concurrency: list[PositiveInt]
    rounds: PositiveInt = 3
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
    input_tokens: PositiveInt = 128
    output_tokens: PositiveInt = 64
    concurrency: list[PositiveInt] = Field(default_factory=lambda: [1, 4, 8, 16, 32])


class PrefillScenario(PerfScenario):
    input_tokens: PositiveInt = 4096
    output_tokens: PositiveInt = 128
    concurrency: list[PositiveInt] = Field(default_factory=lambda: [4])


class DecodeScenario(PerfScenario):
    input_tokens: PositiveInt = 128
    output_tokens: PositiveInt = 1024
    concurrency: list[PositiveInt] = Field(default_factory=lambda: [1, 8])


class RateScenario(_Model):
    enabled: bool = False
    input_tokens: PositiveInt = 128
    output_tokens: PositiveInt = 64
    rates: list[Annotated[float, Field(gt=0)]] = Field(default_factory=lambda: [1.0, 4.0])
    rounds: PositiveInt = 3
    requests_per_round: PositiveInt = 32
    seed: int = 0


class LongContextScenario(_Model):
    enabled: bool = True
    lengths: list[PositiveInt] = Field(default_factory=lambda: [32_768, 131_072, 263_168, 524_288])
    include_model_limit: bool = Field(True, description="Also run at the model limit minus output and template.")
    depths: list[Annotated[float, Field(ge=0, le=1)]] = Field(default_factory=lambda: [0.1, 0.5, 0.9])
    output_tokens: PositiveInt = 128
    prompt_style: Literal["chat", "completion"] = "chat"


class BoundaryScenario(_Model):
    enabled: bool = True
    lengths: list[PositiveInt] = Field(default_factory=lambda: [261_000, 263_000, 289_000])
    output_tokens: PositiveInt = 16


class PrefixCacheScenario(_Model):
    enabled: bool = True
    prompt_tokens: PositiveInt = 4400
    repeats: PositiveInt = 5
    output_tokens: PositiveInt = 16


class FunctionalScenario(_Model):
    enabled: bool = True
    skip: list[str] = Field(default_factory=list, description="Check names to skip (reported not_applicable).")


class Scenarios(_Model):
    functional: FunctionalScenario = FunctionalScenario()
    warmup: bool = True
    short: ShortScenario = ShortScenario()
    prefill: PrefillScenario = PrefillScenario()
    decode: DecodeScenario = DecodeScenario()
    rate: RateScenario = RateScenario()
    long_context: LongContextScenario = LongContextScenario()
    boundary: BoundaryScenario = BoundaryScenario()
    prefix_cache: PrefixCacheScenario = PrefixCacheScenario()


class SLO(_Model):
    ttft_s: Annotated[float, Field(gt=0)] | None = None
    tpot_s: Annotated[float, Field(gt=0)] | None = None
    e2e_s: Annotated[float, Field(gt=0)] | None = None


class KubernetesSettings(_Model):
    namespace: str = "dayone"
    conn_id: str = Field("kubernetes_default", description="Airflow connection of the cluster.")
    startup_timeout_s: PositiveInt = Field(1800, description="Readiness wait, covering a cold start.")
    registry_conn_id: str | None = Field(None, description="Airflow connection with registry credentials.")
    model_volume_claim: str | None = Field(None, description="PVC holding the model weights.")
    model_mount_path: str = "/models"
    service_account: str = "dayone-engine"
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    cleanup_age_s: PositiveInt = Field(6 * 3600, description="Cleanup removes DayOne objects older than this.")
    run_as_user: int | None = Field(
        1000, ge=0, description="UID of engine containers (non-root); None keeps the image's own user (often root)."
    )


class ArchiveSettings(_Model):
    bucket: str = Field("dayone", min_length=3)
    prefix: str = "runs"
    conn_id: str = Field("dayone_s3", description="Airflow connection: login/password and endpoint_url in extra.")


class RegressionThresholds(_Model):
    output_tps_drop: float = Field(0.10, ge=0, le=1)
    ttft_p95_rise: float = Field(0.20, ge=0)


class RunConfig(_Model):
    run_id: str | None = Field(None, description="Set by the pipeline; letters, digits, '-', '_', '.'.")
    model: ModelSpec = ModelSpec()
    engines: list[EngineSpec] = Field(
        default_factory=lambda: [EngineSpec(name="sim-sglang", dialect="sglang")], min_length=1
    )
    scenarios: Scenarios = Scenarios()
    slo: SLO = SLO()
    target: Literal["local", "kubernetes"] = "local"
    dry_run: bool = False
    request_timeout_s: Annotated[float, Field(gt=0)] = 600.0
    round_error_rate_max: float = Field(0.05, ge=0, le=1, description="A round above this error rate fails.")
    kubernetes: KubernetesSettings = KubernetesSettings()
    archive: ArchiveSettings = ArchiveSettings()
    thresholds: RegressionThresholds = RegressionThresholds()

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", v):
            raise ValueError(f"{v!r} is not a valid run id")
        return v

    @model_validator(mode="after")
    def _cross_checks(self) -> RunConfig:
        names = [e.name for e in self.engines]
        if len(set(names)) != len(names):
            raise ValueError("engines: engine names must be distinct")
        if self.target == "kubernetes":
            for i, e in enumerate(self.engines):
                if not e.image:
                    raise ValueError(f"engines[{i}].image: required when target is kubernetes")
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

    def usable_context_tokens(self, output_tokens: int) -> int:
        return self.model.context_limit_tokens - output_tokens - self.model.template_overhead_tokens

    def engine(self, name: str) -> EngineSpec:
        for e in self.engines:
            if e.name == name:
                return e
        raise KeyError(f"engine {name!r} is not in the run config (have: {', '.join(x.name for x in self.engines)})")


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "config"


def _fix_for(path: str) -> str:
    last = re.sub(r"\[\d+\]$", "", path).rsplit(".", 1)[-1]
    return FIX_HINTS.get(last, "see this field's description in the trigger form or docs/config")


def parse_run_config(data: dict[str, Any] | None) -> RunConfig:
    """Validate a run config dict; raise ConfigError naming every bad field and its fix."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([("config", f"expected an object, got {type(data).__name__}", "pass a JSON object")])
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            path = _path(tuple(err["loc"]))
            msg = err["msg"].removeprefix("Value error, ")
            # Cross-field errors carry their own field path in the message.
            m = re.match(r"^([A-Za-z_][\w.\[\]]*): (.*)$", msg)
            if m and path == "config":
                path, msg = m.group(1), m.group(2)
            if err["type"] == "extra_forbidden":
                msg = "unknown field"
                problems.append((path, msg, "remove it or check its spelling"))
                continue
            problems.append((path, msg, _fix_for(path)))
        raise ConfigError(problems) from None
