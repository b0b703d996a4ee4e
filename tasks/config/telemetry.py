"""GPU telemetry: the DCGM exporter each engine's GPUs are read at during measured rounds."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tasks.config.base import ConfigModel
from tasks.config.engines import EngineSpec


class EngineTelemetry(ConfigModel):
    dcgm_url: str | None = Field(None, description="This engine's GPUs: its node's DCGM exporter, e.g. "
                                 "http://NODE:9400/metrics, or a Prometheus /federate URL selecting DCGM_FI_DEV_*.")
    gpu_uuids: list[str] | None = Field(None, description="The engine's GPUs among those the exporter reports; "
                                        "default: the GPUs its hardware record names, else all the exporter reports.")


class TelemetrySettings(ConfigModel):
    """GPU telemetry per round from a DCGM exporter (tasks/telemetry/gpu.py): utilization, memory,
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
