"""The Prometheus text the simulator serves: its engine's /metrics under the dialect's names, and
its DCGM exporter's imitation for the simulated GPUs (/dcgm/metrics), labelled as dcgm-exporter
labels its series. What the numbers are lives in engine.py and gpus.py; this is only their format."""

from __future__ import annotations

from tasks.core.dcgm import FB_FREE, FB_USED, GPU_UTIL, POWER_USAGE, TOTAL_ENERGY
from tasks.sim.engine import Engine
from tasks.sim.gpus import SimGpus


def engine_metrics_text(engine: Engine) -> str:
    d = engine.dialect
    names = dict(d.metric_names)
    mode = engine.profile.quirks.metrics
    cache_roles = ("queries", "hits") if d.name == "vllm" else ("prompt", "hits")
    if mode == "renamed":
        names.update(d.renamed)
    elif mode == "absent":
        for role in cache_roles:
            names.pop(role, None)
    labels = f'model_name="{engine.profile.model}"' + (',engine="0"' if d.name == "vllm" else "")
    out: list[str] = []
    spec = engine.profile.speculative is not None  # vLLM registers its spec metrics only when on
    counters = ("queries", "hits", "prompt", "generation", "requests", "preemptions")
    counters += ("spec_drafts", "spec_draft_tokens", "spec_accepted") if spec else ()
    # SGLang's counters are labelled prometheus_client counters, absent until their first increment: its own
    # warm-up generation at start counts prompt and generated tokens, so only the cache hits (before the first
    # hit) and the retractions (before the first) are missing from a fresh 0.5.18's exposition.
    lazy = ("hits", "preemptions") if d.name == "sglang" else ()
    for role in counters:
        if role in names and not (role in lazy and engine.counters[role] + engine.counter_base == 0):
            out += [f"# HELP {names[role]} {role} (DayOne simulator)", f"# TYPE {names[role]} counter",
                    f"{names[role]}{{{labels}}} {float(engine.counters[role] + engine.counter_base)}"]
    if d.name == "vllm":  # prometheus_client's process collector: in vLLM's default registry, not SGLang's
        out += ["# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
                "# TYPE process_start_time_seconds gauge", f"process_start_time_seconds {engine.started_ts}"]
    gauges = [("running", engine.running), ("waiting", len(engine.waiting)), ("hit_rate", engine.last_hit_rate),
              ("kv_usage", engine.kv_usage())]
    if spec:
        gauges += [("spec_accept_length", engine.last_spec[0]), ("spec_accept_rate", engine.last_spec[1])]
    for role, value in gauges:
        if role in names:
            out += [f"# TYPE {names[role]} gauge", f"{names[role]}{{{labels}}} {float(value)}"]
    for role, hist in engine.hist.items():
        if role not in names:
            continue
        if d.name == "sglang" and role == "itl" and hist.n == 0:
            continue  # 0.5.18's labelled histogram: absent until a request's second token (its warm-up makes one)
        name = names[role]
        out.append(f"# TYPE {name} histogram")
        running = 0
        for bound, count in zip(hist.bounds, hist.counts):
            running += count
            out.append(f'{name}_bucket{{{labels},le="{bound}"}} {float(running)}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(hist.n)}')
        out.append(f"{name}_sum{{{labels}}} {hist.total}")
        out.append(f"{name}_count{{{labels}}} {float(hist.n)}")
    return "\n".join(out) + "\n"


def dcgm_metrics_text(gpus: SimGpus, kv_usage: float, host: str) -> str:
    """One series per GPU and field, with the values the exporter took at its last refresh."""
    utilization, memory_mib, power_w, energy_mj = gpus.exporter_readings(kv_usage)
    # FB_FREE and FB_USED as dcgm-exporter's default counters give them (no FB_TOTAL by default).
    free_mib = max(0.0, gpus.spec.memory_total_mib - memory_mib)
    values = ((GPU_UTIL, "gauge", 100.0 * utilization), (FB_USED, "gauge", memory_mib), (FB_FREE, "gauge", free_mib),
              (POWER_USAGE, "gauge", power_w), (TOTAL_ENERGY, "counter", energy_mj))
    spec = gpus.spec
    out = []
    for name, kind, value in values:
        out += [f"# HELP {name} (DayOne simulator)", f"# TYPE {name} {kind}"]
        for i, gpu in enumerate(gpus.uuids):
            labels = (f'gpu="{i}",UUID="{gpu}",pci_bus_id="00000000:{i + 0x18:02X}:00.0",device="nvidia{i}",'
                      f'modelName="{spec.product}",Hostname="{host}"')
            out.append(f"{name}{{{labels}}} {value!r}")
    return "\n".join(out) + "\n"
