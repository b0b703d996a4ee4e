"""What the GPUs spent in a round, from a DCGM exporter: utilization, memory used, power and the
energy counter (one `telemetry_rounds` row per round), with joules per output token.

The DCGM dialect lives here and nowhere else: dcgm-exporter's metric names (etc/default-counters.csv)
and its `UUID` label. A Prometheus `/federate` URL that selects these series reads the same. The
exporter is read once just before a round's first send, every `interval_s` on a thread of its own
while the round runs, and once just after its last completion. Per reading the engine's GPUs are
combined as the engine uses them together: utilization averaged, memory and power summed. Energy is
the energy counter's delta from the first reading to the last, per GPU; a counter that fell on any
GPU between two readings voids the round's energy, with the reason (tasks/evidence/window.py's rule).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from tasks.evidence import metrics

# dcgm-exporter's default counters (NVIDIA/dcgm-exporter etc/default-counters.csv), with their units.
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # gauge, percent
FB_USED = "DCGM_FI_DEV_FB_USED"  # gauge, MiB
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"  # gauge, W
TOTAL_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # counter, mJ since boot
NAMES = (GPU_UTIL, FB_USED, POWER_USAGE, TOTAL_ENERGY)
UUID_LABEL = "UUID"
INDEX_LABEL = "gpu"
# Where the simulator serves its exporter (a real exporter is its own endpoint, usually :9400/metrics).
SIMULATOR_PATH = "/dcgm/metrics"
SAMPLE_INTERVAL_S = 0.5


@dataclass(frozen=True)
class TelemetrySource:
    """Where one engine's GPUs are read, and which of the exporter's GPUs are the engine's."""

    url: str
    gpu_uuids: tuple[str, ...] | None  # None: every GPU the exporter reports
    interval_s: float = SAMPLE_INTERVAL_S


def source_for(config: Any, engine: str, base_url: str, hardware_uuids: Iterable[str] | None = None) -> TelemetrySource | None:
    """The engine's telemetry source from the run config (telemetry section), or None when off.

    A simulated engine without a URL of its own is read at its own exporter; its GPUs are its own,
    so the machine's (hardware record) do not filter them. Elsewhere the GPUs default to the ones
    the hardware record says the engine got, when known."""
    settings = config.telemetry
    if not settings.enabled:
        return None
    url, uuids = settings.endpoint(config.engine(engine))
    if url is None:
        return TelemetrySource(base_url.rstrip("/") + SIMULATOR_PATH, uuids, settings.interval_s)
    known = tuple(hardware_uuids or ()) or None
    return TelemetrySource(url, uuids or known, settings.interval_s)


# ---- readings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuReading:
    """One read of the exporter: per GPU (by UUID) the value of each DCGM name it reported."""

    ts: float
    gpus: dict[str, dict[str, float]]

    def total(self, name: str) -> float | None:
        values = [g[name] for g in self.gpus.values() if name in g]
        return sum(values) if values else None

    def mean(self, name: str) -> float | None:
        values = [g[name] for g in self.gpus.values() if name in g]
        return sum(values) / len(values) if values else None


def _ours(text: str) -> str:
    """Only the lines of the four names (and their TYPE/HELP), so a node's full exporter or a wide
    federate answer costs the parser little while a round is being timed."""
    keep = []
    for line in text.splitlines():
        body = line[7:] if line.startswith(("# TYPE ", "# HELP ")) else line
        if body.startswith(NAMES):
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_reading(text: str, gpu_uuids: Iterable[str] | None = None, ts: float | None = None) -> GpuReading:
    """The DCGM samples of an exposition, per GPU, narrowed to `gpu_uuids` when given."""
    wanted = None if gpu_uuids is None else set(gpu_uuids)
    gpus: dict[str, dict[str, float]] = {}
    for s in metrics.parse_samples(_ours(text)):
        # prometheus_client names a counter's sample NAME_total though the exporter writes NAME.
        name = s.name[: -len("_total")] if s.name.endswith("_total") and s.name[: -len("_total")] in NAMES else s.name
        if name not in NAMES:
            continue
        uuid = s.labels.get(UUID_LABEL) or f"gpu{s.labels.get(INDEX_LABEL, '?')}"
        if wanted is not None and uuid not in wanted:
            continue
        gpus.setdefault(uuid, {})[name] = s.value
    return GpuReading(time.time() if ts is None else ts, gpus)


def read(client: httpx.Client, source: TelemetrySource) -> GpuReading | None:
    """One reading, or None where the exporter could not be read."""
    try:
        r = client.get(source.url)
        if r.status_code != 200:
            return None
        return parse_reading(r.text, source.gpu_uuids)
    except (httpx.HTTPError, ValueError):
        return None


# ---- the round's row (pure) ----------------------------------------------------------------------


def energy_fall(readings: list[GpuReading]) -> str | None:
    """Why the energy delta must not be published: a GPU's counter fell between two readings."""
    reasons: list[str] = []
    for a, b in zip(readings, readings[1:]):
        for uuid in sorted(a.gpus.keys() & b.gpus.keys()):
            e0, e1 = a.gpus[uuid].get(TOTAL_ENERGY), b.gpus[uuid].get(TOTAL_ENERGY)
            if e0 is not None and e1 is not None and e1 < e0:
                reasons.append(f"{TOTAL_ENERGY} of {uuid} fell from {e0:.0f} to {e1:.0f} mJ during the round: "
                               "the counter was reset (driver reload, GPU reset or exporter restart)")
    return "; ".join(reasons) or None


def ok_output_tokens(request_rows: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(output tokens of the round's ok requests, ok requests whose usage did not say)."""
    tokens = unknown = 0
    for r in request_rows:
        if r.get("status") != "ok":
            continue
        n = r.get("completion_tokens")
        if n is None:
            unknown += 1
        else:
            tokens += int(n)
    return tokens, unknown


def telemetry_round_row(
    keys: Mapping[str, Any],
    client_row: Mapping[str, Any],
    readings: list[GpuReading | None],
    request_rows: Iterable[Mapping[str, Any]],
) -> dict[str, Any]:
    """One `telemetry_rounds` row. `readings`: the one before the round, those taken while it ran,
    the one after it (None where a read failed)."""
    before, during, after = readings[0], [r for r in readings[1:-1] if r is not None], readings[-1]
    read = [r for r in readings if r is not None]
    not_exposed: dict[str, str] = {}
    row: dict[str, Any] = {
        **keys,
        **{k: client_row.get(k) for k in ("concurrency", "rate_rps", "input_tokens", "output_tokens", "warmup")},
        "gpus": None, "gpu_uuids": None,
        "started_ts": None if before is None else before.ts,
        "ended_ts": None if after is None else after.ts,
        "samples": len(during),
        "gpu_util_mean_pct": None, "gpu_util_peak_pct": None, "memory_used_peak_mib": None,
        "power_mean_w": None, "power_peak_w": None, "energy_j": None, "energy_unpublished": None,
        "ok_output_tokens": None, "energy_per_output_token_j": None, "readings": None, "unavailable": None,
    }
    tokens, unknown = ok_output_tokens(request_rows)
    row["ok_output_tokens"] = tokens
    if not read or not any(r.gpus for r in read):
        row["unavailable"] = ("the DCGM endpoint could not be read during the round" if not read
                              else "the DCGM endpoint reported none of the engine's GPUs")
        row["not_exposed"] = None
        return row
    uuids = sorted({u for r in read for u in r.gpus})
    row["gpus"], row["gpu_uuids"] = len(uuids), uuids

    def series(name: str, combine: str) -> list[float]:
        values = [getattr(r, combine)(name) for r in during]
        return [v for v in values if v is not None]

    util, power = series(GPU_UTIL, "mean"), series(POWER_USAGE, "total")
    memory = [v for r in read if (v := r.total(FB_USED)) is not None]  # its peak may sit at either end
    for figure, name, values in (("utilization", GPU_UTIL, util), ("power", POWER_USAGE, power),
                                 ("memory", FB_USED, memory)):
        if not values:
            exposed = any(name in g for r in read for g in r.gpus.values())
            not_exposed[figure] = (f"no reading of {name} while the round ran" if exposed
                                   else f"{name} not exposed by the exporter")
    row["gpu_util_mean_pct"] = sum(util) / len(util) if util else None
    row["gpu_util_peak_pct"] = max(util) if util else None
    row["power_mean_w"] = sum(power) / len(power) if power else None
    row["power_peak_w"] = max(power) if power else None
    row["memory_used_peak_mib"] = max(memory) if memory else None

    if before is None or after is None:
        row["energy_unpublished"] = "the DCGM endpoint could not be read " + ("before" if before is None else "after") + " the round"
    elif not any(TOTAL_ENERGY in g for g in (*before.gpus.values(), *after.gpus.values())):
        not_exposed["energy"] = f"{TOTAL_ENERGY} not exposed by the exporter"
    elif before.gpus.keys() != after.gpus.keys():
        row["energy_unpublished"] = "the GPUs read before and after the round differ"
    else:
        row["energy_unpublished"] = energy_fall(read)
        if row["energy_unpublished"] is None:
            mj = sum(after.gpus[u][TOTAL_ENERGY] - before.gpus[u][TOTAL_ENERGY] for u in before.gpus
                     if TOTAL_ENERGY in before.gpus[u] and TOTAL_ENERGY in after.gpus[u])
            row["energy_j"] = mj / 1000.0
    if row["energy_j"] is not None:
        if unknown:
            not_exposed["energy_per_output_token_j"] = f"{unknown} ok requests carried no usage (their tokens unknown)"
        elif tokens > 0:
            row["energy_per_output_token_j"] = row["energy_j"] / tokens
    t0 = read[0].ts
    row["readings"] = [[round(r.ts - t0, 4), r.mean(GPU_UTIL), r.total(POWER_USAGE), r.total(FB_USED)] for r in read]
    row["not_exposed"] = not_exposed or None
    return row


# ---- sampling while the round runs ---------------------------------------------------------------


@dataclass
class TelemetryWatch:
    """Reads the exporter before a round, every `interval_s` on a thread while it runs, and after it.

    `start()` before the first send, `stop_sampling()` when the last request ended, `finish()` after."""

    source: TelemetrySource
    timeout_s: float = 5.0
    readings: list[GpuReading | None] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TelemetryWatch:
        with httpx.Client(timeout=self.timeout_s) as client:
            self.readings.append(read(client, self.source))
        self._thread = threading.Thread(target=self._run, name="dayone-gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        interval = self.source.interval_s
        with httpx.Client(timeout=max(1.0, 4 * interval)) as client:
            while not self._stop.wait(interval):
                reading = read(client, self.source)
                if reading is not None:
                    self.readings.append(reading)

    def stop_sampling(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def finish(self) -> TelemetryWatch:
        self.stop_sampling()
        with httpx.Client(timeout=self.timeout_s) as client:
            self.readings.append(read(client, self.source))
        return self

    def row(self, keys: Mapping[str, Any], client_row: Mapping[str, Any],
            request_rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        return telemetry_round_row(keys, client_row, self.readings, request_rows)
