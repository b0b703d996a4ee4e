"""What an engine states about itself once it is up, recorded by the startup step beside its findings:
its memory and KV capacity (tasks/evidence/kv_capacity.py), read from the startup log by its adapter."""

from __future__ import annotations

from typing import Any

from tasks.evidence.kv_capacity import kv_capacity_row


def record_startup_facts(ctx: Any, engine: str, startup_log: str) -> dict[str, Any]:
    """Write the engine's kv_capacity row; returns the figures for the step's result."""
    ectx = ctx.engine(engine)
    ep = ectx.endpoint
    row = kv_capacity_row(ep.row_keys("startup"), ep.adapter, startup_log, ctx.config.model.context_limit_tokens)
    with ctx.run_dir.rows("kv_capacity", engine, "startup") as out:
        out.write(row)
    return {"kv_tokens": row["kv_tokens"], "fits_context": row["fits_context"]}
