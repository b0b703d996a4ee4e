"""summary.json as typed models: the one document every reader of a run's results goes through.

`build_summary` returns a RunSummary; summary.json is its `model_dump(mode="json")`; a reader of
an archived summary.json calls `read_summary`, which refuses another schema version by name. Every
model forbids unknown fields, so a figure added on one side and not the other fails loudly in the
tests instead of vanishing from the report. A figure that is not published (TTFT on an engine
whose stream timing is unreliable) is None; the `figures` of a level hold only published ones.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.load.stats import FIRST_ENCOUNTER_FIGURES

SCHEMA = "dayone.summary/2"


class SummaryVersionError(ValueError):
    """An archived summary.json of a schema version this code does not read."""


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


# ---- per level of a performance scenario -----------------------------------------------------------


class Figure(_Doc):
    """One figure of a level: median over rounds, every round's value (None: round failed), spread flag."""

    median: float | None
    rounds: list[float | None]
    spread: bool


class FirstEncounter(_Doc):
    """The first round of a level's shape on a server new to it, beside the steady medians."""

    round: int | None
    warmup: bool
    source: str
    ttft_p95_s: float | None = None
    ttft_p99_s: float | None = None
    e2e_p95_s: float | None = None
    e2e_p99_s: float | None = None

    def figure(self, name: str) -> float | None:
        """One of the four tail figures by name (None: not measured, or not published)."""
        return getattr(self, name) if name in FIRST_ENCOUNTER_FIGURES else None


class PerfLevel(_Doc):
    label: str
    concurrency: int | None
    rate_rps: float | None
    rounds: list[int | None]
    # The engine's start each round ran on (measurement.launches), beside `rounds`; 0 throughout with one launch.
    launches: list[int | None] = Field(default_factory=list)
    round_status: list[str | None]
    first_encounter_rounds: list[int | None]
    figures: dict[str, Figure]
    first_encounter: FirstEncounter | None
    rounds_failed: int
    requests_failed: int
    length_deviations: int

    def median(self, figure: str) -> float | None:
        f = self.figures.get(figure)
        return None if f is None else f.median


class PerfScenario(_Doc):
    input_tokens: int
    output_tokens: int
    levels: list[PerfLevel]
    engine_restarted: bool = False  # the engine restarted during this step: its figures are flagged
    # The engines measured with this one, rounds alternating (ABBA): round n of each is a pair.
    interleaved_with: list[str] = Field(default_factory=list)
    launches: list[Launch] = Field(default_factory=list)  # the engine's starts this scenario measured


class Launch(_Doc):
    """One start of an engine within a scenario (measurement.launches): 0 is the deployment the run readied."""

    launch: int
    ready_waited_s: float | None = None  # its readiness wait


# ---- evidence of one engine ----------------------------------------------------------------------


class TtftVerdict(_Doc):
    reliable: bool
    reason: str


class CheckEvidence(_Doc):
    outcome: str | None
    status: int | None
    field: str | None
    reason: str | None
    excerpt: str | None


class Needle(_Doc):
    scenario: str
    target_tokens: int
    prompt_tokens: int | None
    depth: float
    attempt: int
    first_encounter: bool | None
    ttft_s: float | None
    e2e_s: float | None
    passed: bool
    status: str | None
    error: str | None
    expected: str | None
    answer: str | None


class Boundary(_Doc):
    needles: list[Needle]
    restarts: CheckEvidence | None


class NeedleCount(_Doc):
    passed: int
    total: int


class PrefixCache(_Doc):
    """The prefix-cache verdict (tasks/evidence/cache.py); its TTFT half is None when not published."""

    verdict: str
    reason: str | None = None
    hit_rate: float | None = None
    ttft_decrease: float | None = None
    cold_ttft_s: float | None = None
    hot_ttft_median_s: float | None = None
    engine: str | None = None
    server_queries_delta: float | None = None
    server_hits_delta: float | None = None
    hit_rate_unpublished: str | None = None
    cold_e2e_s: float | None = None
    hot_e2e_median_s: float | None = None
    prompt_tokens: int | None = None
    prompt_text_tokens: int | None = None
    template_tokens: int | None = None
    repeats: int | None = None
    cache_cleared: bool | None = None
    cache_clear_detail: str | None = None
    withheld: str | None = None  # why the TTFT half is not published (the engine's or the trial's streams)
    engine_restarted: bool = False


class CacheTrial(_Doc):
    trial: int
    ttft_s: float | None
    e2e_s: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    server_queries_delta: float | None
    server_hits_delta: float | None
    deltas_unpublished: str | None
    status: str | None
    error: str | None


class StartupFinding(_Doc):
    finding: str | None
    severity: str | None
    line: str | None


class ServedRevision(_Doc):
    """The model revision an engine served (tasks/evidence/revision.py `revision_identity`)."""

    configured: str | None
    moving: bool  # the configured revision is a branch or tag name, not a commit
    served: str | None  # the commit (or sha256 of the weights) the engine or target reported
    served_source: str | None
    reported_revision: str | None
    asked: list[str] = Field(default_factory=list)  # the endpoints that answered
    identity: str | None


class StepRestarts(_Doc):
    outcome: str | None
    reason: str | None
    restarts: int | None


class EngineRestarts(_Doc):
    """Restarts over the run (tasks/evidence/restarts.py): `at_least` when /metrics alone saw one."""

    total: int
    at_least: bool
    restarted_steps: list[str]
    steps: dict[str, StepRestarts]


class OutcomeSummary(_Doc):
    """A step's recorded outcome (tasks/state.py StepOutcome), as published."""

    status: str | None
    detail: str | None


class EngineRound(_Doc):
    """What the engine spent in one round, from its own /metrics (engine_rounds table). The client's
    TTFT and the gap finding are None where the engine's TTFT is not published."""

    scenario: str
    level: str
    round: int
    warmup: bool | None
    preemption_metric: str | None
    preemptions: float | None
    preempted: bool | None
    kv_usage_peak: float | None
    waiting_peak: float | None
    queue_time_mean_s: float | None
    server_ttft_mean_s: float | None
    server_ttft_p99_s: float | None
    client_ttft_mean_s: float | None
    ttft_gap_finding: str | None
    spec_acceptance_rate: float | None
    spec_mean_accepted_length: float | None
    deltas_unpublished: str | None
    not_exposed: list[str]


class TelemetryRound(_Doc):
    """What the engine's GPUs spent in one round, from a DCGM exporter (telemetry_rounds table):
    utilization and power means, peak memory, energy and joules per output token; `readings` are
    [seconds since the engine's first reading, utilization %, power W] for the chart."""

    scenario: str
    level: str
    round: int
    gpus: int | None
    gpu_util_mean_pct: float | None
    memory_used_peak_mib: float | None
    power_mean_w: float | None
    energy_j: float | None
    ok_output_tokens: int | None
    energy_per_output_token_j: float | None
    why_missing: str | None  # the exporter unreadable, a reset or a hole, GPUs unknown, the round too short
    readings: list[list[float | None]] = Field(default_factory=list)
    exporter_refresh_s: float | None = None  # the exporter's refresh, measured from when its values changed


class TelemetryWindow(_Doc):
    """Energy over one scenario's measured rounds at one load level taken together
    (tasks/evidence/telemetry.py energy_windows): published only where the window spans at least 10 of
    the exporter's refreshes and the engine's rounds fill it; otherwise null with why_missing."""

    scenario: str
    level: str
    rounds: int
    span_s: float | None
    idle_share: float | None  # of the window, between the engine's rounds
    exporter_refresh_s: float | None
    refreshes: float | None  # span_s / exporter_refresh_s
    gpus: int | None
    energy_j: float | None
    ok_output_tokens: int | None
    energy_per_output_token_j: float | None
    why_missing: str | None


class KvPeak(_Doc):
    """The highest KV usage the engine's gauge read in one scenario's rounds."""

    scenario: str
    usage: float  # 0..1
    tokens: float | None  # usage x the KV tokens the engine logged


class KvCapacity(_Doc):
    """Memory and KV capacity from the engine's own startup log (kv_capacity table), and the peak KV
    usage it reached per scenario (engine_rounds). None where the log did not state a figure."""

    kv_tokens: int | None
    kv_cache_gib: float | None
    weights_gib: float | None
    engine_context_tokens: int | None
    max_concurrency: float | None
    max_concurrency_source: str | None
    configured_context_tokens: int
    fits_context: bool | None
    fit_detail: str
    not_logged: list[str]
    peaks: list[KvPeak]


class Hardware(_Doc):
    """Where the engine ran (hardware table): node, GPUs and the versions beside them, or the CPU;
    `sources` names where each figure came from, `unknown` what no source stated."""

    target: str
    node: str | None
    gpu_product: str | None
    gpu_memory_mib: int | None
    gpu_count: int | None
    driver_version: str | None
    cuda_version: str | None
    gpu_uuids: list[str]
    cpu_model: str | None
    cpu_cores: int | None
    sources: dict[str, str]
    unknown: dict[str, str]


class ClientLoad(_Doc):
    """The CPU the load client got in one scenario's measured rounds (client_shards table): a round whose
    client waited for a core more than 5% of it (other processes had the core) was measured on a busy
    machine, and is named in busy_rounds."""

    scenario: str
    rounds: int
    processes: int  # the most client processes in one round
    cpu_cores: float | None  # the busiest round's client CPU / its wall time
    waited_share: float | None  # the worst round's (and process's) share waited for a core; None: not measured
    busy_rounds: list[str]  # "c=64 round 2: 7%"
    processes_reasons: list[str] = Field(default_factory=list)  # why that many processes (client_shards.shards_reason)
    wide_sends: int = 0  # measured requests whose write bracket was over 1 ms: sent at the stamp before the write


class CapacityProbe(_Doc):
    """One load the capacity search probed (capacity table): its rounds' goodput share and interval."""

    probe: int
    phase: str  # bracket or bisect
    load: float  # concurrency, or req/s in mode rate
    rounds: int
    requests: int
    requests_good: int
    round_shares: list[float | None]
    goodput_share: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: Literal["pass", "fail"]
    close: bool  # the interval still held the target after the extra rounds: the point estimate decided


class Capacity(_Doc):
    """The highest load whose goodput share met the target under the run's SLO (scenarios/capacity.py).
    `capacity` is None below start, and also when it is not published: judged on TTFT or TPOT for an
    engine whose stream timing is unreliable (`withheld` says why); the probes stay as measured."""

    mode: Literal["concurrency", "rate"]
    input_tokens: int
    output_tokens: int
    target_goodput_share: float
    confidence: float
    start: float
    max: float
    step: float
    outcome: Literal["found", "at_least_max", "below_start"]
    capacity: float | None
    bracket: list[float | None]  # [highest load that passed, lowest that failed]
    text: str
    probes: list[CapacityProbe]
    withheld: str | None = None
    engine_restarted: bool = False


class EngineSummary(_Doc):
    dialect: str
    image: str | None
    image_digest: str | None
    ready: bool
    ready_detail: str | None
    ready_waited_s: float | None
    ttft: TtftVerdict
    checks: dict[str, str]
    check_evidence: dict[str, CheckEvidence]
    perf: dict[str, PerfScenario]
    long_context: list[Needle]
    boundary: Boundary
    needles: NeedleCount
    prefix_cache: PrefixCache | None
    cache_trials: list[CacheTrial]
    startup_findings: list[StartupFinding]
    restarts: EngineRestarts
    steps: dict[str, OutcomeSummary]
    # Restarts while it loaded, judged once it was ready (tasks/evidence/restarts.py `cold_start_finding`).
    restarts_before_ready: StartupFinding | None = None
    served_revision: ServedRevision | None = None  # which weights it served (tasks/evidence/revision.py)
    engine_rounds: list[EngineRound] = Field(default_factory=list)  # what the engine spent, per round
    client_load: list[ClientLoad] = Field(default_factory=list)  # the CPU the load client got, per scenario
    capacity: Capacity | None = None  # the capacity search's result, when it ran
    kv_capacity: KvCapacity | None = None  # memory and KV capacity from the engine's startup log
    hardware: Hardware | None = None  # where the engine ran
    telemetry_rounds: list[TelemetryRound] = Field(default_factory=list)  # what its GPUs spent, per round
    telemetry_windows: list[TelemetryWindow] = Field(default_factory=list)  # energy per scenario and load level

    @property
    def ttft_published(self) -> bool:
        return self.ttft.reliable

    def levels(self, scenario: str) -> list[PerfLevel]:
        perf = self.perf.get(scenario)
        return [] if perf is None else perf.levels


# ---- run level -----------------------------------------------------------------------------------


class Validation(_Doc):
    ran: bool
    success: bool
    failed_tables: list[str]
    quarantined: bool | None


class Slo(_Doc):
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None


class ScenarioSettings(_Doc):
    enabled: dict[str, bool]
    warmup: bool
    rounds: dict[str, int]
    long_context_lengths: list[int]
    long_context_depths: list[float]
    prefix_cache_prompt_tokens: int
    prefix_cache_repeats: int
    slo: Slo


class Regression(_Doc):
    engine: str
    scenario: str
    concurrency: int | None
    metric: str
    baseline_run_id: str | None
    baseline_value: float | None
    value: float | None
    change: float | None
    threshold: float | None
    regressed: bool
    ratio: float | None = None  # this run / baseline over rounds (geometric means), with its interval
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str | None = None
    baseline_kind: str | None = None  # last_good or reference (tasks/compare.py)
    covers: str | None = None  # what variation the interval covers


class NotTested(_Doc):
    engine: str
    what: str
    why: str


class Comparison(_Doc):
    """One engine against the base engine (the config's first) on one figure of one level
    (tasks/evidence/effects.py): the ratio engine/base of the geometric means of their round values,
    with its confidence interval, and the verdict read with the figure's direction."""

    scenario: str
    level: str  # the level's label, e.g. c=4
    figure: str
    base: str
    engine: str
    ratio: float | None  # None: not enough rounds
    low: float | None
    high: float | None
    confidence: float
    verdict: Literal["better", "worse", "no detectable difference", "not enough rounds"]
    detectable: float | None  # the smallest change this run would detect, e.g. 0.14 = ±14%
    rounds_needed_for_5pct: int | None  # rounds a side that would detect a 5% change
    paired: bool = False  # interleaved rounds (or launches), paired by repetition; else two independent samples
    # What variation the interval covers (tasks/evidence/effects.py): the rounds of one deployment, or with
    # measurement.launches > 1 the engines' starts, each launch the geometric mean of its rounds.
    covers: str | None = None
    launches: int = 1  # the launches a side the interval rests on (1: its values are rounds)
    reason: str | None = None  # why there is no interval (too few rounds, no noise measured)

    def interval(self, covers: bool = False) -> str:
        """`1.21× (95% CI 1.10–1.33)` (with `covers`: `..., covering round-to-round noise ...)`), or the
        verdict when there is no interval."""
        if self.ratio is None or self.low is None or self.high is None:
            return self.verdict
        from tasks.evidence.effects import ratio_interval

        return ratio_interval(self.ratio, self.low, self.high, f"{self.confidence:.0%} CI",
                              self.covers if covers else None)


class DecisionLine(_Doc):
    topic: Literal["leads", "reliability", "not_tested", "regressions"]
    text: str


class Variant(_Doc):
    """One engine of an experiment: the settings where it differs from the base."""

    engine: str
    changes: dict[str, Any]


class ExperimentSummary(_Doc):
    """How the engines were compared: the base, the factors, each variant's diff, and the design run."""

    base: str
    factors: list[str]
    design: str  # factorial or one_at_a_time
    base_values: dict[str, Any]  # the base's value of every setting a variant changes
    variants: list[Variant]


class RunSummary(_Doc):
    """The whole of summary.json."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), validate_by_name=True,
                              validate_by_alias=True, serialize_by_alias=True)

    # "schema" in the JSON: the name would shadow BaseModel.schema here.
    schema_version: Literal["dayone.summary/2"] = Field(SCHEMA, alias="schema")
    run_id: str
    model: str
    model_revision: str | None
    target: str
    dry_run: bool
    validation_success: bool
    validation: Validation
    scenarios: ScenarioSettings
    engines: dict[str, EngineSummary]
    restarts: dict[str, int]  # per engine, for the report's header
    run_steps: dict[str, OutcomeSummary]
    regressions: list[Regression]
    # Baselines the nightly comparison could not use, each with what differs ("engine args [...] then, [...] now")
    baselines_skipped: list[str] = Field(default_factory=list)
    # Baselines compared although the weights may differ (a moving model revision, weights not identified)
    baseline_caveats: list[str] = Field(default_factory=list)
    limits: list[str]
    # What this run did not prove, from its config and results (tasks/report/limits.py `not_proved`).
    not_proved: list[str] = Field(default_factory=list)
    not_tested: list[NotTested]
    confidence: float  # of every interval in `comparisons`
    comparisons: list[Comparison]
    decision: list[DecisionLine]
    # interleaved (engines up together, rounds alternating ABBA), randomized (one after another in an
    # order drawn per run), or lanes (engines sharing a node one after another in config order)
    measurement_design: str = "lanes"
    engine_order: list[list[str]] = Field(default_factory=list)  # the run's positions, as measured
    experiment: ExperimentSummary | None = None
    # Engines whose GPU slices overlap or that ran on different GPU products (tasks/evidence/hardware.py).
    slice_findings: list[str] = Field(default_factory=list)


def read_summary(doc: Any) -> RunSummary:
    """A parsed summary.json as a RunSummary; SummaryVersionError names another schema version."""
    found = doc.get("schema") if isinstance(doc, dict) else None
    if found != SCHEMA:
        raise SummaryVersionError(f"summary.json of schema {found!r}; this DayOne reads {SCHEMA!r} only")
    return RunSummary.model_validate(doc)
