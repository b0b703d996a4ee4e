"""The traffic scenarios' step bodies (sessions, shared prefix, your own prompts), each run between restart readings; the
figures are computed once, by the report, from their tables."""

from __future__ import annotations

from typing import Any

from tasks.evidence.restarts import watch_step
from tasks.steps.context import RunContext
from tasks.steps.engine_steps import RequestsFailed, fail_on_failed_requests


def sessions(ctx: RunContext, engine: str) -> dict[str, Any]:
    """Multi-turn chat sessions (tasks/scenarios/sessions.py); fails when too many planned turns did not complete."""
    from tasks.scenarios.sessions import failed_turns, run_sessions

    ectx = ctx.engine(engine)
    result = watch_step(ectx, "sessions", ctx.restart_count(engine), lambda: run_sessions(ectx))
    rows = [r for r in ctx.run_dir.read_rows("session_turns", engine) if r.get("scenario") == "sessions"]
    reason = failed_turns(rows, ctx.config.step_failed_share_max)
    if reason:
        raise RequestsFailed(reason)
    return {"engine": engine, "turns": len(rows), "engine_restarted": result["engine_restarted"]}


def shared_prefix(ctx: RunContext, engine: str) -> dict[str, Any]:
    """Groups sharing a prefix (tasks/scenarios/shared_prefix.py); fails like a performance step on failed requests."""
    from tasks.scenarios.shared_prefix import run_shared_prefix

    ectx = ctx.engine(engine)
    result = watch_step(ectx, "shared_prefix", ctx.restart_count(engine), lambda: run_shared_prefix(ectx))
    fail_on_failed_requests(ctx, engine, "shared_prefix")
    return {"engine": engine, "levels": len(result["levels"]), "expected_reuse": result["expected_reuse"],
            "engine_restarted": result["engine_restarted"]}


def dataset(ctx: RunContext, engine: str) -> dict[str, Any]:
    """Your own prompts (tasks/scenarios/dataset.py); fails like a performance step on failed requests."""
    from tasks.scenarios.dataset import run_dataset

    ectx = ctx.engine(engine)
    s3 = ctx.s3 if ctx.archive_client is not None else None
    result = watch_step(ectx, "dataset", ctx.restart_count(engine), lambda: run_dataset(ectx, s3))
    fail_on_failed_requests(ctx, engine, "dataset")
    return {"engine": engine, "rows": result["rows"], "levels": len(result["levels"]),
            "engine_restarted": result["engine_restarted"]}
