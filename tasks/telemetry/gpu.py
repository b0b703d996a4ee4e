"""What the GPUs spent in a round, from a DCGM exporter: utilization, memory used, power and the
energy counter (one `telemetry_rounds` row per round), with joules per output token.

The DCGM dialect (tasks/core/dcgm.py: dcgm-exporter's metric names and its `UUID` label) is read
here and nowhere else; a Prometheus `/federate` URL that selects these series reads the same. The
exporter is read just before a round's first send, every `interval_s` on a thread of its own, and just
after its last completion; the engine's GPUs are combined as it uses them (utilization averaged,
memory and power summed). Energy is published only over a window of at least MIN_REFRESHES of the
exporter's measured refreshes (`energy_rule`, `energy_windows`) and voided by the window rule
(tasks/telemetry/window.py): PROTOCOL.md section 8, "What the engine spent".
"""

from __future__ import annotations

import bisect
import json
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tasks.core.dcgm import (FB_FREE, FB_TOTAL, FB_USED, GPU_UTIL, INDEX_LABEL, NAMES, POWER_USAGE, SIMULATOR_PATH,
                             TOTAL_ENERGY, UUID_LABEL)
from tasks.telemetry.window import gaps

SAMPLE_INTERVAL_S = 0.5

# Each end of a window reads a value up to one refresh old, so the span the energy delta covers is off
# by less than one refresh in all: at least 10 refreshes keep that under a tenth of the window.
MIN_REFRESHES = 10
# Idle time between an engine's rounds inside its window (pauses, another engine's interleaved rounds)
# is energy its tokens did not spend. An idle GPU draws about a tenth of its busy power (the simulator's
# defaults: 70 of 700 W), so a quarter of the window idle moves J/token by ~3%; an interleaved second
# engine (half the window) does not pass.
MAX_IDLE_SHARE = 0.25


@dataclass(frozen=True)
class TelemetrySource:
    """Where one engine's GPUs are read, and which of the exporter's GPUs are the engine's."""

    url: str
    gpu_uuids: tuple[str, ...] | None  # None: every GPU the exporter reports
    interval_s: float = SAMPLE_INTERVAL_S
    # The GPUs read are the engine's: named by UUID, or the simulator's own exporter. Otherwise the
    # exporter's every GPU is the node's, and energy over them is no engine's.
    gpus_known: bool = True


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
    return TelemetrySource(url, uuids or known, settings.interval_s, gpus_known=bool(uuids or known))


# ---- readings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuReading:
    """One read of the exporter: per GPU (by UUID) the value of each DCGM name it reported."""

    ts: float
    gpus: dict[str, dict[str, float]]
    exposed_ts: float | None = None  # the newest sample timestamp the exposition carried (Prometheus /federate)

    @property
    def refreshed_ts(self) -> float:
        """When these values were taken: the exporter's own timestamp where it gives one."""
        return self.ts if self.exposed_ts is None else self.exposed_ts

    def total(self, name: str) -> float | None:
        values = [g[name] for g in self.gpus.values() if name in g]
        return sum(values) if values else None

    def mean(self, name: str) -> float | None:
        values = [g[name] for g in self.gpus.values() if name in g]
        return sum(values) / len(values) if values else None

    def cards_memory(self) -> dict[str, list[float | None]]:
        """Per GPU (by UUID) [used MiB, total MiB]: total is FB_TOTAL where the exporter gives it, else
        FB_FREE + FB_USED (the driver's reserved memory aside), None where neither."""
        out: dict[str, list[float | None]] = {}
        for uuid, g in sorted(self.gpus.items()):
            if FB_USED not in g:
                continue
            total = g.get(FB_TOTAL, g[FB_USED] + g[FB_FREE] if FB_FREE in g else None)
            out[uuid] = [g[FB_USED], total]
        return out


def _ours(text: str) -> str:
    """Only the lines of DayOne's names (and their TYPE/HELP), so a node's full exporter or a wide
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
    stamps: list[float] = []
    for family in text_string_to_metric_families(_ours(text)):
        for s in family.samples:
            # prometheus_client names a counter's sample NAME_total though the exporter writes NAME.
            name = s.name[: -len("_total")] if s.name.endswith("_total") and s.name[: -len("_total")] in NAMES else s.name
            if name not in NAMES:
                continue
            uuid = s.labels.get(UUID_LABEL) or f"gpu{s.labels.get(INDEX_LABEL, '?')}"
            if wanted is not None and uuid not in wanted:
                continue
            gpus.setdefault(uuid, {})[name] = float(s.value)
            if s.timestamp is not None:
                stamps.append(float(s.timestamp))
    return GpuReading(time.time() if ts is None else ts, gpus, max(stamps) if stamps else None)


def read(client: httpx.Client, source: TelemetrySource) -> GpuReading | None:
    """One reading, or None where the exporter could not be read."""
    try:
        # Stamped at the middle of the request, not after parsing: the exposition was written while the
        # request was open, and a parse delayed by a busy core says nothing of when its values were taken.
        sent = time.time()
        r = client.get(source.url)
        answered = time.time()
        if r.status_code != 200:
            return None
        return parse_reading(r.text, source.gpu_uuids, ts=(sent + answered) / 2)
    except (httpx.HTTPError, ValueError):
        return None


# ---- the exporter's refresh and the energy rule (pure) -------------------------------------------


def refresh_times(readings: list[GpuReading | None]) -> list[float]:
    """When the exporter's values changed between consecutive readings: its refreshes, as far as
    the readings can tell (a refresh that changed nothing is not seen, which only makes the interval
    look longer and the rule stricter)."""
    read = [r for r in readings if r is not None and r.gpus]
    return [b.refreshed_ts for a, b in zip(read, read[1:]) if a.gpus != b.gpus]


def refresh_interval(times: list[float]) -> float | None:
    """The median time between consecutive refreshes seen (a refresh missed while the sampler waited
    for a core, or between rounds, would stretch a mean); None under two."""
    times = sorted(times)
    gaps_s = sorted(b - a for a, b in zip(times, times[1:]) if b > a)
    return gaps_s[len(gaps_s) // 2] if gaps_s else None


def energy_rule(span_s: float, refresh_s: float | None, changes: int) -> str | None:
    """Why energy over a window of `span_s` may not be published given the exporter's refresh; None: it may."""
    if refresh_s is None:
        return (f"the exporter's values changed {changes} time{'s' if changes != 1 else ''} in {span_s:.1f} s: its "
                f"refresh interval is unknown, and energy needs a window of at least {MIN_REFRESHES} refreshes")
    if span_s < MIN_REFRESHES * refresh_s:
        return (f"{span_s:.1f} s spans {span_s / refresh_s:.1f} of the exporter's refreshes (one every "
                f"{refresh_s:.3g} s) and energy needs {MIN_REFRESHES}: each end reads a value up to one refresh old")
    return None


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


def energy_hole(readings: list[GpuReading | None]) -> str | None:
    """Why the round's energy readings have a hole: a read that failed, came back empty or lost a
    GPU's energy counter between two good ones (the window rule, per GPU)."""
    series = [None if r is None else {f'{TOTAL_ENERGY}{{{UUID_LABEL}="{u}"}}': g[TOTAL_ENERGY]
                                      for u, g in r.gpus.items() if TOTAL_ENERGY in g} for r in readings]
    return gaps(series, "during the round", (TOTAL_ENERGY,))


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


def _energy_void(before: GpuReading | None, after: GpuReading | None, readings: list[GpuReading | None],
                 gpus_known: bool) -> str | None:
    """Why the round's energy counter readings can be used neither alone nor in a window."""
    if not gpus_known:
        return ("the engine's GPUs are not known (no telemetry.engines.<engine>.gpu_uuids, no GPU UUIDs in its "
                "hardware record): the exporter's GPUs are its node's, and their energy is no engine's")
    if before is None or after is None:
        return "the DCGM endpoint could not be read " + ("before" if before is None else "after") + " the round"
    if before.gpus.keys() != after.gpus.keys():
        return "the GPUs read before and after the round differ"
    reasons = [r for r in (energy_hole(readings), energy_fall([r for r in readings if r is not None])) if r]
    return "; ".join(reasons) or None


def telemetry_round_row(
    keys: Mapping[str, Any],
    client_row: Mapping[str, Any],
    readings: list[GpuReading | None],
    request_rows: Iterable[Mapping[str, Any]],
    gpus_known: bool = True,
) -> dict[str, Any]:
    """One `telemetry_rounds` row. `readings`: the one before the round, those taken while it ran,
    the one after it (None where a read failed)."""
    before, during, after = readings[0], [r for r in readings[1:-1] if r is not None], readings[-1]
    read = [r for r in readings if r is not None]
    not_exposed: dict[str, str] = {}
    row: dict[str, Any] = {
        **keys,
        **{k: client_row.get(k) for k in ("concurrency", "rate_rps", "input_tokens", "output_tokens", "warmup")},
        "gpus": None, "gpu_uuids": None, "gpus_known": gpus_known,
        "started_ts": None if before is None else before.ts,
        "ended_ts": None if after is None else after.ts,
        "samples": len(during), "reads_failed": sum(1 for r in readings if r is None),
        "exporter_refresh_s": None, "exporter_changes": None,
        "gpu_util_mean_pct": None, "gpu_util_peak_pct": None, "memory_used_peak_mib": None,
        "power_mean_w": None, "power_peak_w": None, "energy_j": None, "energy_unpublished": None,
        "energy_void": None, "energy_first_mj": None, "energy_last_mj": None,
        "ok_output_tokens": None, "usage_unknown": None, "energy_per_output_token_j": None, "readings": None,
        "unavailable": None,
        # Memory per card before the round's first send and after its last completion (memory_per_card).
        "memory_cards": {"before": None if before is None else before.cards_memory() or None,
                         "after": None if after is None else after.cards_memory() or None},
    }
    tokens, unknown = ok_output_tokens(request_rows)
    row["ok_output_tokens"], row["usage_unknown"] = tokens, unknown
    if not read or not any(r.gpus for r in read):
        row["unavailable"] = ("the DCGM endpoint could not be read during the round" if not read
                              else "the DCGM endpoint reported none of the engine's GPUs")
        row["not_exposed"] = None
        return row
    uuids = sorted({u for r in read for u in r.gpus})
    row["gpus"], row["gpu_uuids"] = len(uuids), uuids
    changes = refresh_times(readings)
    row["exporter_changes"], row["exporter_refresh_s"] = changes, refresh_interval(changes)

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

    if (before is not None and after is not None
            and not any(TOTAL_ENERGY in g for g in (*before.gpus.values(), *after.gpus.values()))):
        not_exposed["energy"] = f"{TOTAL_ENERGY} not exposed by the exporter"
    else:
        row["energy_void"] = _energy_void(before, after, readings, gpus_known)
        if row["energy_void"] is None:
            assert before is not None and after is not None
            row["energy_first_mj"] = {u: g[TOTAL_ENERGY] for u, g in before.gpus.items() if TOTAL_ENERGY in g}
            row["energy_last_mj"] = {u: g[TOTAL_ENERGY] for u, g in after.gpus.items() if TOTAL_ENERGY in g}
            # A round alone is a window: published when it spans enough refreshes (else its level's window).
            short = energy_rule(after.ts - before.ts, row["exporter_refresh_s"], len(changes))
            if short is None:
                row["energy_j"] = sum(row["energy_last_mj"][u] - row["energy_first_mj"][u]
                                      for u in row["energy_first_mj"] if u in row["energy_last_mj"]) / 1000.0
            else:
                row["energy_unpublished"] = f"the round: {short}; its scenario's rounds at this load are taken together"
        else:
            row["energy_unpublished"] = row["energy_void"]
    if row["energy_j"] is not None:
        if unknown:
            not_exposed["energy_per_output_token_j"] = f"{unknown} ok requests carried no usage (their tokens unknown)"
        elif tokens > 0:
            row["energy_per_output_token_j"] = row["energy_j"] / tokens
    t0 = read[0].ts
    row["readings"] = [[round(r.ts - t0, 4), r.mean(GPU_UTIL), r.total(POWER_USAGE), r.total(FB_USED)] for r in read]
    row["not_exposed"] = not_exposed or None
    return row


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def energy_windows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Energy per scenario and load level: the measured rounds of one shape taken together, in time
    order, one window from the first round's first reading to the last round's last. Published under
    the same rule as a round (MIN_REFRESHES of the exporter's refreshes, its refresh measured over
    the window's readings), when the engine's rounds fill the window (MAX_IDLE_SHARE) and no round's
    readings were void, no counter fell between rounds and every ok request said its tokens."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("warmup"):
            continue
        key = (r.get("scenario"), r.get("concurrency"), r.get("rate_rps"), r.get("input_tokens"), r.get("output_tokens"))
        groups.setdefault(key, []).append(r)
    out = []
    for (scenario, concurrency, rate, input_tokens, output_tokens), members in groups.items():
        members = sorted(members, key=lambda r: r.get("started_ts") or 0.0)
        window: dict[str, Any] = {
            "scenario": scenario, "concurrency": concurrency, "rate_rps": rate, "input_tokens": input_tokens,
            "output_tokens": output_tokens, "rounds": len(members), "span_s": None, "idle_share": None,
            "exporter_refresh_s": None, "refreshes": None, "gpus": None, "energy_j": None,
            "ok_output_tokens": sum(int(r.get("ok_output_tokens") or 0) for r in members),
            "energy_per_output_token_j": None, "why_missing": None,
        }
        out.append(window)
        window["why_missing"] = _window_void(members)
        if window["why_missing"]:
            continue
        first, last = members[0], members[-1]
        span = float(last["ended_ts"]) - float(first["started_ts"])
        busy = sum(float(r["ended_ts"]) - float(r["started_ts"]) for r in members)
        changes = sorted(t for r in members for t in (_json(r.get("exporter_changes")) or []))
        refresh = refresh_interval(changes)
        window.update(span_s=span, idle_share=max(0.0, 1.0 - busy / span) if span > 0 else None,
                      exporter_refresh_s=refresh, refreshes=None if refresh is None else span / refresh,
                      gpus=first.get("gpus"))
        if window["idle_share"] is not None and window["idle_share"] > MAX_IDLE_SHARE:
            window["why_missing"] = (f"the engine's GPUs were idle between its rounds for {window['idle_share']:.0%} "
                                     "of the window (another engine's interleaved rounds, the pauses between rounds): "
                                     f"energy no token of this level spent; at most {MAX_IDLE_SHARE:.0%}. A round that "
                                     f"alone spans {MIN_REFRESHES} refreshes is published on its own")
            continue
        window["why_missing"] = energy_rule(span, refresh, len(changes))
        if window["why_missing"]:
            continue
        e0, e1 = _json(first["energy_first_mj"]), _json(last["energy_last_mj"])
        window["energy_j"] = sum(e1[u] - e0[u] for u in e0 if u in e1) / 1000.0
        if window["ok_output_tokens"] > 0:
            window["energy_per_output_token_j"] = window["energy_j"] / window["ok_output_tokens"]
    return out


def _window_void(members: list[Mapping[str, Any]]) -> str | None:
    """Why the rounds of a window give no energy: a round unread or void, usage unknown, a counter
    that fell or GPUs that changed between two rounds."""
    for r in members:
        why = r.get("unavailable") or r.get("energy_void")
        if why:
            return f"round {r.get('round')}: {why}"
        if r.get("energy_first_mj") is None:
            return f"round {r.get('round')}: {(_json(r.get('not_exposed')) or {}).get('energy', 'no energy readings')}"
        if r.get("usage_unknown"):
            return f"round {r.get('round')}: {r['usage_unknown']} ok requests carried no usage (their tokens unknown)"
    for a, b in zip(members, members[1:]):
        e_end, e_start = _json(a["energy_last_mj"]), _json(b["energy_first_mj"])
        if set(e_end) != set(e_start):
            return f"the GPUs read in rounds {a.get('round')} and {b.get('round')} differ"
        fell = sorted(u for u in e_end if e_start[u] < e_end[u])
        if fell:
            return (f"{TOTAL_ENERGY} of {fell[0]} fell from {e_end[fell[0]]:.0f} to {e_start[fell[0]]:.0f} mJ between "
                    f"rounds {a.get('round')} and {b.get('round')}: the counter was reset")
    return None


# ---- memory per card ----------------------------------------------------------------------------

def memory_per_card(rows: Iterable[Mapping[str, Any]], weights_mib: float | None, kv_cache_mib: float | None,
                    state_pool_mib: float | None = None) -> list[dict[str, Any]]:
    """Used, total and headroom per card, and "other" = used - (weights + KV + state pool), at points of
    the run: "after readiness" (the reading before the engine's first round, warmup included: no load
    had run yet) and "after <scenario>" (the reading after that scenario's last measured round).

    `weights_mib`, `kv_cache_mib`, `state_pool_mib`: one card's share as the startup log states it; weights
    or KV not stated leave "other" None, never a guess (a state pool not stated counts in "other")."""
    rows = sorted((r for r in rows if r.get("started_ts") is not None), key=lambda r: r["started_ts"])
    points: list[tuple[str, dict[str, Any]]] = []
    if rows and (first := (_json(rows[0].get("memory_cards")) or {}).get("before")):
        points.append(("after readiness", first))
    last: dict[str, Mapping[str, Any]] = {}
    for r in rows:
        if not r.get("warmup"):
            last[r["scenario"]] = r  # its last round in time
    for scenario in sorted(last, key=lambda s: last[s].get("ended_ts") or 0.0):
        if after := (_json(last[scenario].get("memory_cards")) or {}).get("after"):
            points.append((f"after {scenario}", after))
    known = None if weights_mib is None or kv_cache_mib is None else weights_mib + kv_cache_mib + (state_pool_mib or 0.0)
    return [{"when": when, "cards": [
        {"uuid": uuid, "used_mib": used, "total_mib": total, "headroom_mib": None if total is None else total - used,
         "other_mib": None if known is None else used - known}
        for uuid, (used, total) in sorted(cards.items())]} for when, cards in points]


def memory_rows_from_readings(readings: list[tuple[float, float, Mapping[str, list[float]]]],
                              rounds: Iterable[Mapping[str, Any]], max_age_s: float) -> list[dict[str, Any]]:
    """Rows in telemetry_rounds' shape for memory_per_card from timed readings of memory per card (nvidia-smi in
    the engine's pod: hardware.memory_readings, each (time before the call, time after it, cards)): for each round
    ({scenario, warmup, started_ts, ended_ts}) the last reading whose call ended at or before its start and the
    first whose call began at or after its end, so neither can hold a value of the round itself; each within
    `max_age_s` of the round (a reading further off, from before a relaunch or after a hole in the log, is none)."""
    ends = [end for _, end, _ in readings]
    starts = [start for start, _, _ in readings]
    out = []
    for r in rounds:
        start, end = float(r["started_ts"]), float(r["ended_ts"])
        i, j = bisect.bisect_right(ends, start) - 1, bisect.bisect_left(starts, end)
        before = readings[i][2] if i >= 0 and start - ends[i] <= max_age_s else None
        after = readings[j][2] if j < len(starts) and starts[j] - end <= max_age_s else None
        out.append({"scenario": r["scenario"], "warmup": bool(r.get("warmup")), "started_ts": start, "ended_ts": end,
                    "memory_cards": {"before": None if before is None else dict(before),
                                     "after": None if after is None else dict(after)}})
    return out


def round_spans(requests: Iterable[Mapping[str, Any]], rounds: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each round's span from its requests (first send to last completion) with the rounds table's warmup flag:
    {scenario, warmup, started_ts, ended_ts}, for memory read apart from the rounds (DCGM off)."""
    def key(r: Mapping[str, Any]) -> tuple[Any, ...]:
        return r.get("scenario"), r.get("concurrency"), r.get("rate_rps"), r.get("round")

    warmup = {key(r): bool(r.get("warmup")) for r in rounds}
    spans: dict[tuple[Any, ...], list[float]] = {}
    for r in requests:
        if r.get("send_ts") is None:
            continue
        sent = float(r["send_ts"])
        done = sent + float(r.get("e2e_s") or 0.0)
        span = spans.setdefault(key(r), [sent, done])
        span[0], span[1] = min(span[0], sent), max(span[1], done)
    return [{"scenario": k[0], "warmup": warmup.get(k, False), "started_ts": a, "ended_ts": b}
            for k, (a, b) in sorted(spans.items(), key=lambda kv: kv[1][0])]


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
        # A slow answer is a late reading, not a hole: wait for it as long as for the first and last
        # (a busy node once kept a 20 ms sampler's read past a 1 s limit and voided a level's energy).
        with httpx.Client(timeout=self.timeout_s) as client:
            while not self._stop.wait(interval):
                self.readings.append(read(client, self.source))  # None: a failed read, a hole in the window

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
        return telemetry_round_row(keys, client_row, self.readings, request_rows, self.source.gpus_known)
