"""Functional checks (PROTOCOL.md section 4): one small module per check, run in this order.

Each returns pass, fail or not_applicable with its evidence; `run_functional` writes them as the
`checks` partition "functional". A check that raises is a fail with the error as evidence: one
broken check never hides the others.
"""

from __future__ import annotations


from tasks.checks import (
    chat,
    chat_streaming,
    completions_echo,
    image_input,
    model_list,
    openai_sdk,
    output_streams,
    reasoning_split,
    streaming_usage,
    tool_call,
    tool_call_streaming,
)
from tasks.checks.base import FAIL, NOT_APPLICABLE, CheckResult, Probe
from tasks.core.names import CHECK_NAMES
from tasks.engines.context import EngineContext

SCENARIO = "functional"
CHECKS = (
    model_list,
    chat,
    chat_streaming,
    reasoning_split,
    tool_call,
    tool_call_streaming,
    image_input,
    completions_echo,
    completions_echo.EchoTrue,
    streaming_usage,
    output_streams,
    openai_sdk,
)
if tuple(c.NAME for c in CHECKS) != CHECK_NAMES:  # the names the run config accepts in functional.skip
    raise ImportError(f"tasks/core/names.py lists {CHECK_NAMES}, the checks run {tuple(c.NAME for c in CHECKS)}")


def run_check(module, probe: Probe) -> CheckResult:  # noqa: ANN001 (a check module)
    try:
        return module.run(probe)
    except Exception as exc:  # noqa: BLE001 -- a crashing check is a failed check, with the error
        return CheckResult(module.NAME, FAIL, {"status": None, "field": "", "excerpt": str(exc)[:200],
                                               "reason": f"the check raised {type(exc).__name__}"})


def run_functional(ctx: EngineContext) -> list[dict]:
    """Run every check against the endpoint; write and return the `checks` rows."""
    skip = list(ctx.config.scenarios.functional.skip)  # names known: checked when the config was parsed
    ep = ctx.endpoint
    rows: list[dict] = []
    with ep.http_client() as client, ctx.run_dir.rows("checks", ep.engine, SCENARIO) as out:
        probe = Probe(ep, client, ctx.config.model.reasoning)
        for module in CHECKS:
            if module.NAME in skip:
                result = CheckResult(module.NAME, NOT_APPLICABLE,
                                     {"status": None, "field": "", "excerpt": "",
                                      "reason": "skipped by scenarios.functional.skip"})
            else:
                result = run_check(module, probe)
            row = {**ep.row_keys(SCENARIO), "check": result.check, "outcome": result.outcome,
                   "evidence": result.evidence}
            out.write(row)
            rows.append(row)
    return rows


__all__ = ["CHECKS", "CHECK_NAMES", "run_functional"]
