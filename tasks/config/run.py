"""The run config: one validated model that every entry point builds (parse it with tasks/config/parse.py).

Its sections live by domain beside it in tasks/config/; the checks here are those across sections.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from tasks.config.archive import ArchiveSettings
from tasks.config.base import ConfigModel, Fix, field_path
from tasks.config.choice import ChoiceSettings
from tasks.config.engines import EngineSpec
from tasks.config.experiment import Experiment
from tasks.config.kubernetes import KubernetesSettings
from tasks.config.llamacpp import LlamaCppSettings
from tasks.config.load import LoadSettings, MeasurementSettings
from tasks.config.model import ModelSpec
from tasks.config.scenarios import Scenarios
from tasks.config.telemetry import TelemetrySettings
from tasks.config.thresholds import SLO, RegressionThresholds
from tasks.config.variants import covers, effective, expand, factor_level, undeclared
from tasks.config.models import KNOWN_MODELS


class RunConfig(ConfigModel):
    run_id: str | None = Field(None, description="Set by the pipeline; letters, digits, '-', '_', '.'.")
    model: ModelSpec = Field(ModelSpec(), title="Model", description="The model every engine serves: name (as "
                             "/v1/models lists it), revision, context window in tokens.")
    engines: Annotated[list[EngineSpec], Fix("give at least one engine with distinct names")] = Field(
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
    target: Annotated[Literal["local", "kubernetes"],
                      Fix("use 'local' (engine as a process on this machine) or 'kubernetes'")] = Field(
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
    choice: ChoiceSettings = Field(
        ChoiceSettings(), title="Choice by purpose",
        description="The purposes the decision summary picks an engine for, and the order each weighs the evidence "
        "in (answers and failed requests always first).")
    experiment: Experiment | None = Field(
        None, title="Experiment (optional)", description="A single-variable A/B or factor sweep over a base engine "
        "(tasks/config/variants.py): base, factors with their levels. Empty ({}): no experiment.")

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
                i, j = factor_level(pairs, changes)
                raise ValueError(f"experiment.factors[{i}].levels[{j}]: {pairs[i][1][j]!r} makes an invalid engine "
                                 f"({field_path(tuple(err['loc']))}: {err['msg'].removeprefix('Value error, ')}). "
                                 f"Fix: give a value that {field_path(tuple(err['loc']))} accepts") from None
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
        self._runner_pod_checks()
        self.telemetry.check(self.engines, self.target)
        sc = self.scenarios
        for path, enabled, lengths, output_tokens in (
                ("scenarios.long_context.lengths", sc.long_context.enabled, sc.long_context.lengths,
                 sc.long_context.output_tokens),
                ("scenarios.boundary.lengths", sc.boundary.enabled, sc.boundary.lengths, sc.boundary.output_tokens),
                ("scenarios.quality.kv_context_tokens", sc.quality.enabled, sc.quality.kv_context_tokens,
                 sc.quality.max_tokens),
                ("scenarios.quality.nll_lengths_tokens", sc.quality.enabled, sc.quality.nll_lengths_tokens or [], 1)):
            limit = self.usable_context_tokens(output_tokens)
            for i, n in enumerate(lengths):
                if enabled and n > limit:
                    raise ValueError(f"{path}[{i}]: {n} is over the model limit "
                                     f"({self.model.context_limit_tokens} minus output and template = {limit})")
        for path, enabled, longest, output_tokens, fix in (
                ("scenarios.sessions.turns", sc.sessions.enabled, sc.sessions.longest_prompt_tokens(),
                 sc.sessions.output_tokens, "fewer turns or shorter user_tokens/output_tokens"),
                ("scenarios.shared_prefix.prefix_tokens", sc.shared_prefix.enabled, sc.shared_prefix.input_tokens,
                 sc.shared_prefix.output_tokens, "a shorter prefix_tokens or suffix_tokens")):
            if enabled and longest > self.usable_context_tokens(output_tokens):
                raise ValueError(f"{path}: the longest prompt ({longest} tokens) is over the model limit "
                                 f"({self.model.context_limit_tokens} minus output and template = "
                                 f"{self.usable_context_tokens(output_tokens)}). Fix: {fix}")
        return self

    def _experiment_checks(self, exp: Experiment) -> None:
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

    def _runner_pod_checks(self) -> None:
        """What runner pods (kubernetes.measure_from: cluster) cannot do: run beside a local engine,
        start engines anew mid-step (they hold no rights to deploy), or read an Airflow connection."""
        if self.kubernetes.measure_from != "cluster":
            return
        if self.target != "kubernetes":
            raise ValueError("kubernetes.measure_from: cluster runs the measuring steps in pods beside engines on "
                             "Kubernetes, and target is local. Fix: set target: kubernetes, or measure_from: worker")
        if self.measurement.launches > 1:
            raise ValueError("measurement.launches: a further launch redeploys the engines from within the measuring "
                             "step, which a runner pod may not do. Fix: launches: 1, or kubernetes.measure_from: worker")
        for i, e in enumerate(self.engines):
            if e.api_key_connection:
                raise ValueError(f"engines[{i}].api_key_connection: a runner pod cannot read an Airflow connection. "
                                 f"Fix: put the key in a Kubernetes Secret and name it in api_key_secret, or "
                                 f"kubernetes.measure_from: worker")

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
