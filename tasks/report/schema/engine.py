"""One engine's part of summary.json: everything the run measured and found for it."""

from __future__ import annotations

from pydantic import Field

from tasks.report.schema.base import Doc
from tasks.report.schema.cache import CacheTrial, PrefixCache
from tasks.report.schema.capacity import Capacity
from tasks.report.schema.evidence import (EngineMaturity, EngineRestarts, OutcomeSummary, ServedRevision,
                                          StartupFinding, TailCause, TtftVerdict)
from tasks.report.schema.functional import Boundary, CheckEvidence, Needle, NeedleCount
from tasks.report.schema.perf import PerfLevel, ScenarioResults
from tasks.report.schema.quality import Quality
from tasks.report.schema.trace import TraceReplay
from tasks.report.schema.traffic import Traffic
from tasks.report.schema.telemetry import (ClientLoad, EngineRound, Hardware, KvCapacity, MemoryPerCard, TelemetryRound,
                                          TelemetryWindow)


class EngineSummary(Doc):
    dialect: str
    image: str | None
    image_digest: str | None
    ready: bool
    ready_detail: str | None
    ready_waited_s: float | None
    ttft: TtftVerdict
    checks: dict[str, str]
    check_evidence: dict[str, CheckEvidence]
    perf: dict[str, ScenarioResults]
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
    maturity: EngineMaturity | None = None  # release, preview, nightly or dev, and where that was read
    log_kept: bool = False  # its own log was kept for the whole run (archived as engine.log)
    tail_causes: list[TailCause] = Field(default_factory=list)  # its slow rounds held against that log
    engine_rounds: list[EngineRound] = Field(default_factory=list)  # what the engine spent, per round
    client_load: list[ClientLoad] = Field(default_factory=list)  # the CPU the load client got, per scenario
    capacity: Capacity | None = None  # the capacity search's result, when it ran
    kv_capacity: KvCapacity | None = None  # memory and KV capacity from the engine's startup log
    hardware: Hardware | None = None  # where the engine ran
    telemetry_rounds: list[TelemetryRound] = Field(default_factory=list)  # what its GPUs spent, per round
    telemetry_windows: list[TelemetryWindow] = Field(default_factory=list)  # energy per scenario and load level
    memory_per_card: MemoryPerCard | None = None  # used, total, headroom and other per GPU (DCGM), when read
    quality: Quality | None = None  # the answers checked, when the quality step ran
    traffic: Traffic | None = None  # multi-turn sessions and shared-prefix reuse, when they ran
    trace: TraceReplay | None = None  # the trace replayed, when the trace step ran
    # sessions, shared_prefix and dataset rounds as load levels (compared between engines like perf levels)
    traffic_levels: dict[str, list[PerfLevel]] = Field(default_factory=dict)

    @property
    def ttft_published(self) -> bool:
        return self.ttft.reliable

    def levels(self, scenario: str) -> list[PerfLevel]:
        if scenario == "trace":  # the trace's rounds are one level, at the window's offered rate
            return [self.trace.level] if self.trace is not None and self.trace.level is not None else []
        if scenario in self.traffic_levels:
            return self.traffic_levels[scenario]
        perf = self.perf.get(scenario)
        return [] if perf is None else perf.levels
