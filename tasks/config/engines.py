"""An engine of the run: its name, dialect, image and where it runs, and how its API key is reached."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from tasks.config.base import ConfigModel, Fix, PositiveInt
from tasks.config.llamacpp import LlamaCppSettings
from tasks.config.maturity import Maturity
from tasks.config.sim_profile import Profile

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
# The same grammar for JSON schema (ECMA-262 has no named groups), so the trigger form checks it too.
IMAGE_PATTERN = re.sub(r"\(\?P<\w+>", "(?:", _IMAGE_RE.pattern)


class SecretKeyRef(ConfigModel):
    name: str = Field(..., min_length=1, description="Kubernetes Secret in the run's namespace.")
    key: str = Field("api-key", min_length=1, description="The key within the Secret that holds the value.")


# Field names under which a key would sit inline in the config (which is archived): refused by name.
_INLINE_KEY_FIELDS = ("api_key", "apikey", "api_token", "token", "bearer_token", "authorization", "password")


class EngineSpec(ConfigModel):
    name: Annotated[str, Fix("use lowercase letters, digits and '-', at most 40 characters, starting with a letter "
                             "or digit")] = Field(
        ..., description="Engine name in tables and the archive, e.g. sglang or vllm-preview.",
        json_schema_extra={"pattern": _SLUG_RE.pattern})
    dialect: Annotated[Dialect, Fix(f"use one of {', '.join(DIALECTS)}")] = Field(
        ..., description="API dialect, which picks the engine adapter.")
    image: Annotated[str | None, Fix("use NAME[:TAG] or REGISTRY/NAME[:TAG][@sha256:<64 hex>], e.g. "
                                     "lmsysorg/sglang:v0.5.0")] = Field(
        None, description="Image reference (tag or digest); required for target=kubernetes.",
        json_schema_extra={"pattern": IMAGE_PATTERN})
    args: list[str] = Field(default_factory=list, description="Extra engine arguments, appended to the adapter's.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for the engine.")
    gpus: int = Field(1, ge=0, le=64, description="GPUs in the slice (nvidia.com/gpu).")
    tensor_parallel: PositiveInt | None = Field(None, description="Tensor parallel size; defaults to gpus.")
    node: str | None = Field(None, description="Node name for the slice; engines on one node run one after another.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node labels that place the slice.")
    launcher: Literal["sim", "llamacpp", "vllm", "sglang", "external"] = Field(
        "sim", description="For target=local: DayOne's simulator, llama.cpp's server, vLLM or SGLang from their own "
        "virtual environment (make vllm-venv, make sglang-venv), or an already running endpoint."
    )
    endpoint: Annotated[str | None, Fix("give the base URL of the running server, e.g. "
                                        "http://127.0.0.1:30000")] = Field(
        None, description="Base URL of an already running server (launcher=external).")
    # A free object in the form (the simulator's Profile is large); checked against it when parsed.
    sim_profile: Annotated[dict[str, Any], Fix("give a value the simulator's Profile accepts (tasks/config/sim_profile.py)",
                                               inside=True)] = Field(
        default_factory=dict, description="Simulator profile overrides (launcher=sim), fields of the simulator's "
        "Profile (tasks/config/sim_profile.py), e.g. {\"startup_delay_s\": 1, \"slots\": 8}.")
    llamacpp: LlamaCppSettings | None = Field(
        None, title="llama.cpp settings",
        description="llama.cpp server settings (launcher=llamacpp; on kubernetes, dialect=llamacpp).")
    digest: str | None = Field(None, description="Pinned digest for backfills; overrides resolving the tag.",
                               json_schema_extra={"pattern": r"^sha256:[a-f0-9]{64}$"})
    ready_timeout_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        None, description="Readiness wait for this engine in seconds; default: kubernetes.startup_timeout_s on a "
        "cluster, 120 s plus the simulator's startup delay locally."
    )
    api_key_connection: Annotated[str | None,
                                  Fix("name an Airflow connection whose password field holds the key")] = Field(
        None, min_length=1, description="Airflow connection whose password is the engine's API key (sent as "
        "Authorization: Bearer on every request); the key itself is never in the config.")
    api_key_secret: Annotated[SecretKeyRef | None, Fix("give the Secret's name and key in the run's namespace, e.g. "
                                                       "{name: vllm-key, key: api-key}", inside=True)] = Field(
        None, description="Kubernetes Secret (name, key) in the run's namespace holding the engine's API key.")
    tls_ca_bundle: Annotated[str | None, Fix("give the path of a PEM file with the CA that signed the endpoint's "
                                             "certificate")] = Field(
        None, min_length=1, description="PEM file of the CA that signed an https endpoint's certificate (an internal CA).")
    tls_verify: bool = Field(True, description="Check an https endpoint's certificate; false skips the check.")
    maturity: Annotated[Maturity | None, Fix("use one of release, preview, nightly, dev")] = Field(
        None, description="How far the engine's support of this model is along: release, preview (a dedicated "
        "image whose upstream change is not merged yet), nightly or dev. Default: read from the image's tag words "
        "and its org.opencontainers.image.version label; a value given here wins. For production a preview, "
        "nightly or dev engine ranks below a release engine that passes the same checks.")
    upstream: Annotated[str | None, Fix("give the http(s) URL of the pull request or issue")] = Field(
        None, description="The upstream pull request or issue this engine's support depends on; the report links it.",
        json_schema_extra={"pattern": r"^https?://\S+$"})
    weights_variant: Annotated[str | None, Fix("name the variant, e.g. fp8 or int4-awq")] = Field(
        None, min_length=1, max_length=60, description="A deliberately different weights variant this engine "
        "serves (e.g. fp8, int4-awq): its served weights may differ from the others', and its answers are still "
        "compared with theirs, the difference named as the variant's.")

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

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"https?://\S+", v):
            raise ValueError(f"{v!r} is not an http(s) URL")
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
        if self.launcher in ("vllm", "sglang") and self.dialect != self.launcher:
            raise ValueError(f"launcher: {self.launcher!r} starts the engine of that name, and dialect is "
                             f"{self.dialect!r}. Fix: set dialect: {self.launcher}, or a launcher of dialect "
                             f"{self.dialect}")
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

