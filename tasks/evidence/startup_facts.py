"""What an engine states about itself once it is up, recorded by the startup step beside its findings:
its memory and KV capacity (tasks/evidence/kv_capacity.py), read from the startup log by its adapter,
and where it runs (tasks/telemetry/hardware.py): the platform's facts with what its container printed."""

from __future__ import annotations

from typing import Any

from tasks.telemetry.hardware import merge_pod_report, unknown
from tasks.evidence.kv_capacity import kv_capacity_row
from tasks.state.documents import hardware_doc

# Startup findings that say the engine runs a slower path than its best on this hardware: a fallback
# backend, or a kernel without its tuned config (the Day-1 report: "not vLLM's final ceiling on H20").
CAPS_PERFORMANCE = {"fallback_backend": "a fallback backend", "missing_tuned_config": "a missing tuned kernel config"}


def record_startup_facts(ctx: Any, engine: str, startup_log: str) -> dict[str, Any]:
    """Write the engine's kv_capacity and hardware rows (and the hardware document the manifest shows);
    returns the figures for the step's result."""
    ectx = ctx.engine(engine)
    ep = ectx.endpoint
    keys = ep.row_keys("startup")
    row = kv_capacity_row(keys, ep.adapter, startup_log, ctx.config.model.context_limit_tokens)
    with ctx.run_dir.rows("kv_capacity", engine, "startup") as out:
        out.write(row)
    hardware = merge_pod_report(ctx.target.hardware(ctx.config, ctx.deployment(engine)), startup_log)
    hardware_row = {**keys, "target": ctx.config.target, **hardware, "unknown": unknown(hardware) or None}
    with ctx.run_dir.rows("hardware", engine, "startup") as out:
        out.write(hardware_row)
    ctx.run_dir.write_json(hardware_doc(engine), {k: v for k, v in hardware_row.items() if k not in keys})
    return {"kv_tokens": row["kv_tokens"], "fits_context": row["fits_context"], "node": hardware["node"],
            "gpus": hardware["gpu_count"]}
