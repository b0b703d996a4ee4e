"""The one bridge between Airflow tasks and DayOne's steps (tasks/steps.py).

It turns Airflow's context into the step's arguments (config from params, a run id that is a
valid object-store path segment), records each step's outcome in the run directory so the
report and the final verdict see failures, and maps "not attempted" to a skipped task.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Callable
from typing import Any

log = logging.getLogger("dayone.airflow")

CONFIG_KEYS_EXCLUDED = ("run_conf_note",)


def dayone_run_id(airflow_run_id: str) -> str:
    """`manual__2026-11-30T07:40:34.058616+00:00` -> `manual__2026-11-30T07-40-34.058616-00-00`."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", airflow_run_id)[:128]


def config_from_params(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in dict(params).items() if k not in CONFIG_KEYS_EXCLUDED}


def run_step(step: str, params: dict[str, Any], airflow_run_id: str, engine: str | None = None,
             **kwargs: Any) -> dict[str, Any]:
    from tasks import steps

    run_id = dayone_run_id(airflow_run_id)
    config = config_from_params(params)
    if config.get("target") == "kubernetes":
        from dayone_airflow.kubernetes import use_airflow_connections

        use_airflow_connections()  # cluster and registry credentials from Airflow connections
    fn = steps.STEPS.get(step)
    if step in steps.PERF_SCENARIOS:
        fn, kwargs = steps.perf, {**kwargs, "scenario": step}
    if step in ("archive", "report"):
        from dayone_airflow.connections import s3_client

        # the client is built inside the recorded call: a missing connection is the step's failure
        return recorded(step, engine, run_id, lambda: getattr(steps, step)(config, run_id, s3=s3_client(config)))
    if fn is None:
        raise KeyError(f"unknown step {step!r}")
    args = (config, run_id) if engine is None else (config, run_id, engine)
    return recorded(step, engine, run_id, lambda: fn(*args, **kwargs))


def recorded(step: str, engine: str | None, run_id: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run `call`, writing the step's outcome to state/steps/ (ok, failed with the desensitized
    error, or not attempted -> a skipped task) for the report and the final verdict."""
    from airflow.sdk.exceptions import AirflowSkipException

    from tasks import steps
    from tasks.desensitize import desensitize
    from tasks.staging import RunDir

    name = f"{engine}-{step}" if engine else step
    outcome = {"step": step, "engine": engine}
    try:
        result = call()
    except steps.NotAttempted as exc:
        RunDir(run_id).write_json(f"state/steps/{name}.json", {**outcome, "status": "not_attempted", "detail": str(exc)})
        raise AirflowSkipException(str(exc)) from None
    except Exception as exc:
        RunDir(run_id).write_json(f"state/steps/{name}.json", {
            **outcome, "status": "failed",
            "detail": desensitize(f"{type(exc).__name__}: {exc}"),
            "trace": desensitize(traceback.format_exc(limit=5)),
        })
        raise
    RunDir(run_id).write_json(f"state/steps/{name}.json", {**outcome, "status": "ok"})
    log.info("step %s done: %s", name, desensitize(result))
    return result


RUN_LEVEL_STEPS = ("plan", "pin", "validate", "archive", "report")


def conclude(params: dict[str, Any], airflow_run_id: str,
             run_level_steps: tuple[str, ...] = RUN_LEVEL_STEPS) -> dict[str, Any]:
    """Fail the run (so Airflow's alerting applies) when any step failed, when a run-level step did
    not complete (an archive that never wrote is a failed run, whatever the engines did), or when
    validation failed. Each reason goes to the log and into the exception."""
    from tasks.staging import RunDir

    run_dir = RunDir(dayone_run_id(airflow_run_id))
    outcomes = [run_dir.read_json(str(p.relative_to(run_dir.path)))
                for p in sorted((run_dir.path / "state" / "steps").glob("*.json"))]
    outcomes = [o for o in outcomes if o]
    problems = [f"{o.get('engine') or 'run'}/{o['step']}: {o['detail']}" for o in outcomes
                if o.get("status") == "failed"]
    run_level = {o["step"]: o for o in outcomes if not o.get("engine")}
    for step in run_level_steps:
        outcome = run_level.get(step)
        if outcome is None:
            problems.append(f"run/{step}: never ran (a step before it failed)")
        elif outcome.get("status") == "not_attempted":
            problems.append(f"run/{step}: not attempted ({outcome.get('detail')})")
    if run_level.get("archive", {}).get("status") != "ok" and "archive" in run_level_steps:
        problems.append("nothing of this run was archived")
    validation = run_dir.read_json("validation.json", {})
    if not validation.get("success"):
        problems.append("result tables failed validation (run archived under quarantine/)")
    for problem in problems:
        log.error("run %s: %s", run_dir.run_id, problem)
    if problems:
        raise RuntimeError("DayOne run finished with failures: " + "; ".join(problems))
    return {"steps_ok": len(outcomes)}
