"""Boundary re-test: cold needle requests at lengths around a known risk (default 261K, 263K,
289K), with the engine's restart count read before and after each (PROTOCOL.md section 4).

A restart is a failed check even if the request got an answer: the community report that the
GLM-5.3-Flash Day 1 Hands-on report re-tested was a crash right after a cold prefill near 262K, and
an engine that restarts under a supervisor can still answer the request that came after.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


from tasks.engines.context import EngineContext
from tasks.engines import Readiness
from tasks.evidence.needles import NeedleTrial, needle_request, refuse_over_limit, template_tokens_for
from tasks.load.prompts import tokenize_counter
from tasks.engines.readiness import poll_serving

SCENARIO = "boundary"
CHECK = "boundary_restarts"
DEPTH = 0.5
READY_WAIT_S = 300.0  # after a request: how long the engine may take to come back
# A crash can come moments after the answer (the community report the GLM-5.3-Flash Day 1 Hands-on
# report re-tested: right after a cold prefill), and a restart counter lags the crash: wait this
# long after each request before reading it.
SETTLE_S = 5.0


def _read(restart_count: Callable[[], int | None]) -> int | None:
    try:
        return restart_count()
    except Exception:  # noqa: BLE001 -- an unreadable count is recorded as unknown, not a crash
        return None


def wait_ready(ctx: EngineContext, timeout_s: float = READY_WAIT_S) -> tuple[bool, str]:
    """Poll the adapter's readiness (health, model list, 1-token generation) until ready: the
    readiness wait's own poll (tasks/engines/readiness.py), without a platform to ask; not ready at the
    deadline, the last probe says at which stage."""
    ep = ctx.endpoint

    async def wait() -> Readiness:
        async with ep.access.async_http_client(timeout=10.0) as client:
            return await poll_serving(ep.adapter, ep.base_url, ep.model, client, timeout_s=timeout_s, interval_s=0.5)

    ready = asyncio.run(wait())
    return ready.ready, f"{ready.stage}: {ready.detail}"


def restarts_outcome(readings: list[dict[str, Any]]) -> tuple[str, str]:
    """(outcome, reason) from per-length restart readings {target_tokens, before, after}."""
    restarted = [r for r in readings if r["before"] is not None and r["after"] is not None and r["after"] > r["before"]]
    if restarted:
        where = ", ".join(f"{r['target_tokens']} tokens ({r['before']} -> {r['after']})" for r in restarted)
        return "fail", f"the engine restarted during the boundary requests: {where}"
    lost = [r for r in readings if r["before"] is not None and r["after"] is None]
    if lost:
        return "fail", f"the restart count could not be read after {lost[0]['target_tokens']} tokens (engine gone?)"
    if not readings or all(r["before"] is None for r in readings):
        return "not_applicable", "this target cannot report the engine's restart count"
    return "pass", "no restart across the boundary requests"


def run_boundary(
    ctx: EngineContext, restart_count: Callable[[], int | None], settle_s: float = SETTLE_S
) -> list[dict]:
    """Needle rows (scenario "boundary") plus one `boundary_restarts` check row; both written
    to partition "boundary" of their tables and returned, needles first."""
    spec = ctx.config.scenarios.boundary
    refuse_over_limit(ctx, "boundary")
    ep = ctx.endpoint
    prompt_style = ctx.config.scenarios.long_context.prompt_style
    wait_ready(ctx)  # an earlier step may have left the engine restarting
    needle_rows: list[dict] = []
    readings: list[dict[str, Any]] = []
    with (
        ep.http_client() as client,
        ctx.run_dir.rows("needles", ep.engine, SCENARIO) as out,
    ):
        count = tokenize_counter(client, ep.base_url, ep.adapter)
        template_tokens = template_tokens_for(client, ctx, count, prompt_style)
        for n in spec.lengths:
            before = _read(restart_count)
            row = needle_request(
                client, ctx, SCENARIO, NeedleTrial(n, DEPTH, 1, False), spec.output_tokens, prompt_style, count,
                template_tokens,
            )
            out.write(row)
            needle_rows.append(row)
            time.sleep(settle_s)
            ready, ready_detail = wait_ready(ctx)  # after a crash, let a supervisor bring it back first
            after = _read(restart_count)
            readings.append({"target_tokens": n, "before": before, "after": after, "status": row["status"],
                             "passed": row["passed"], "ready_after": ready, "ready_detail": ready_detail})
    outcome, reason = restarts_outcome(readings)
    check_row = {
        **ep.row_keys(SCENARIO),
        "check": CHECK,
        "outcome": outcome,
        "evidence": {"status": None, "field": "restart_count", "excerpt": "", "reason": reason, "readings": readings},
    }
    with ctx.run_dir.rows("checks", ep.engine, SCENARIO) as out:
        out.write(check_row)
    return needle_rows + [check_row]
