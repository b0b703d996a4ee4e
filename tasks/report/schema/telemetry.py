"""What an engine, its GPUs and the load client spent: per round from /metrics and DCGM, energy per
load level, KV capacity, the hardware, the client's CPU."""

from __future__ import annotations

from pydantic import Field

from tasks.report.schema.base import Doc


class EngineRound(Doc):
    """What the engine spent in one round, from its own /metrics (engine_rounds table), and the client's
    TTFT and ITL beside the engine's histograms over the same window (the scrapes before the first send
    and after the last completion). The client's figures, the gaps and their findings are None where the
    engine's TTFT is not published (its stream timing withheld); a gap is None with
    `timing_gap_unpublished` saying why (the engine has no such histogram: not_exposed)."""

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
    server_itl_mean_s: float | None = None
    server_itl_p99_s: float | None = None
    client_itl_mean_s: float | None = None
    client_tpot_mean_s: float | None = None
    ttft_gap_s: float | None = None
    itl_gap_s: float | None = None
    itl_gap_finding: str | None = None
    client_e2e_mean_s: float | None = None
    server_e2e_mean_s: float | None = None
    e2e_gap_s: float | None = None  # on the TTFT gap's clock: the client's whole stream against the engine's
    timing_gap_unpublished: str | None = None
    no_engine_figures: str | None = None  # a measured round with no engine_rounds row: why
    spec_acceptance_rate: float | None
    spec_mean_accepted_length: float | None
    deltas_unpublished: str | None
    not_exposed: list[str]


class TelemetryRound(Doc):
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


class TelemetryWindow(Doc):
    """Energy over one scenario's measured rounds at one load level taken together
    (tasks/telemetry/gpu.py energy_windows): published only where the window spans at least 10 of
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


class CardMemory(Doc):
    """One GPU's memory at one point of the run (MiB), from the DCGM exporter or nvidia-smi in the engine's pod."""

    uuid: str
    used_mib: float
    total_mib: float | None  # nvidia-smi's memory.total; DCGM_FI_DEV_FB_TOTAL, else FB_FREE + FB_USED; None: neither
    headroom_mib: float | None  # total - used
    other_mib: float | None  # used - (weights + KV + state pool) per card: activations, graphs, allocator, draft


class MemoryPoint(Doc):
    """Memory per card "after readiness" or "after <scenario>"."""

    when: str
    cards: list[CardMemory]


class MemoryPerCard(Doc):
    """Memory per card (tasks/telemetry/gpu.py memory_per_card): used and total per GPU after readiness and
    after each load step, from the DCGM exporter where telemetry is on, else from nvidia-smi in the engine's
    pod (`source`), with one card's share of the startup log's weights,
    KV cache and state pool (share_basis). Version 1; absent from older summaries (None)."""

    version: int = 1
    tensor_parallel: int
    share_basis: str  # how weights and KV per card were read from the startup log
    weights_per_card_mib: float | None
    kv_cache_per_card_mib: float | None
    state_pool_per_card_mib: float | None = None  # where the engine's startup log states its state pool
    source: str | None = None  # where the readings came from and how often: the DCGM exporter, nvidia-smi in the pod
    not_read: str | None = None  # why there are no points where the pod's memory loop ran or said it could not
    points: list[MemoryPoint]


class KvPeak(Doc):
    """The highest KV usage the engine's gauge read in one scenario's rounds."""

    scenario: str
    usage: float  # 0..1
    tokens: float | None  # usage x the KV tokens the engine logged


class KvCapacity(Doc):
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


class Hardware(Doc):
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


class ClientLoad(Doc):
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
    pods: int = 1  # the most runner pods that measured one round together (kubernetes.measure_from: cluster)
    pod_cores: int | None = None  # whole cores of each runner pod; None: measured on the worker
    measured_by: list[str] = Field(default_factory=list)  # "c=512 round 1: 2 runner pods of 4 cores, 8 client processes"
