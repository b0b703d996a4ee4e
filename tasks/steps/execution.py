"""Running a step and recording how it ended (ok, skipped, failed with the desensitized error, or not
attempted), which the report and the run's verdict read. The DAG, the readiness operator and `dayone step`
all go through `execute`, so a step run in a pod records its outcome exactly as a DAG task does."""

from __future__ import annotations

import contextlib
import logging
import traceback
from collections.abc import Callable
from typing import Any

from tasks.config import ConfigError
from tasks.engines.context import EngineContext
from tasks.core.desensitize import desensitize
from tasks.steps.context import NotAttempted, RunContext
from tasks.core.names import PERF_SCENARIOS
from tasks.state.storage import RunDir
from tasks.state.documents import VALIDATION, StepOutcome, manifest, outcome_doc, outcomes, write_outcome
from tasks.state.progress import step_running, step_skipped
from tasks.steps.engine_steps import keep_perf_summary, measure_together
from tasks.steps.protocol import Step, StepResult
from tasks.steps.registry import STEPS

log = logging.getLogger("dayone.steps")


class FailedBefore(RuntimeError):
    """A measurement's earlier try failed; it is not measured again (its rows are the evidence)."""


def _failed_before(ctx: RunContext, step: Step, engines: list[str | None]) -> None:
    if step.retry_after_failure:
        return
    for engine in engines:
        earlier = ctx.run_dir.read_json(outcome_doc(step.name, engine))
        if earlier and earlier.get("status") == "failed":
            raise FailedBefore(f"not measured again: an earlier try failed ({earlier.get('detail')}); "
                               "its rows are the evidence")


def execute(ctx: RunContext, name: str, engine: str | None = None) -> StepResult:
    """Run step `name` (for `engine` when per engine) and record its outcome.

    Raises NotAttempted (recorded as not_attempted) or the step's own error (recorded as failed,
    desensitized); a step switched off by the config is recorded and returned as skipped.
    """
    step = STEPS[name]
    if step.per_engine != (engine is not None):
        raise ValueError(f"step {name} is {'per engine' if step.per_engine else 'run-level'}; engine={engine!r}")
    if not step.enabled(ctx.config):
        reason = f"{name} disabled in the run config"
        write_outcome(ctx.run_dir, StepOutcome(step=name, engine=engine, status="skipped", detail=reason))
        step_skipped(ctx.run_dir, name, engine, reason)
        return StepResult(step=name, engine=engine, status="skipped", detail=reason)

    def run() -> dict[str, Any]:
        _failed_before(ctx, step, [engine])
        return step.run(ctx, engine)

    return record(ctx.run_dir, name, engine, run)


def execute_group(ctx: RunContext, name: str, engines: list[str]) -> StepResult:
    """A performance step over the engines of one position, which are up together: their rounds
    alternate (tasks/scenarios/perf.py run_perf_interleaved) and each engine's outcome is recorded as
    its own. An engine that is not ready is not attempted; the others are measured. Raises the first
    engine's failure after recording every outcome, or NotAttempted when no engine was attempted."""
    step = STEPS[name]
    if not step.per_engine or name not in PERF_SCENARIOS:
        raise ValueError(f"step {name} is not a performance step; only those measure engines together")
    if not step.enabled(ctx.config):
        results = [execute(ctx, name, e) for e in engines]
        return StepResult(step=name, status="skipped", detail=results[0].detail if results else "no engines")
    ready: list[EngineContext] = []
    for e in engines:
        try:
            ready.append(ctx.engine(e))
        except NotAttempted as exc:
            write_outcome(ctx.run_dir, StepOutcome(step=name, engine=e, status="not_attempted", detail=str(exc)))
    if not ready:
        raise NotAttempted(f"{name}: no engine of {', '.join(engines)} is ready")
    names = [r.endpoint.engine for r in ready]
    data: dict[str, Any] = {}
    failures: list[Exception] = []
    with step_running(ctx.run_dir, name, list(names)):  # one step of every engine: each records its end
        try:
            _failed_before(ctx, step, list(names))
            summaries = measure_together(ctx, ready, name)
        except Exception as exc:
            for e in names:  # the engines were measured together: the failure is each one's
                with contextlib.suppress(Exception):
                    record(ctx.run_dir, name, e, lambda exc=exc: _raise(exc))
            raise
        for e in names:  # every engine's outcome is recorded before the first failure is raised
            try:
                data[e] = record(ctx.run_dir, name, e, lambda e=e: keep_perf_summary(ctx, e, name, summaries[e])).data
            except Exception as exc:  # noqa: BLE001
                failures.append(exc)
    if failures:
        raise failures[0]
    return StepResult(step=name, data={"engines": data, "design": summaries[names[0]]["design"]})


def _raise(exc: Exception) -> dict[str, Any]:
    raise exc


def execute_with(build: Callable[[], RunContext], run_dir: RunDir, name: str,
                 engine: str | list[str] | None = None) -> StepResult:
    """`execute` (or, for a list of engines, `execute_group`), building the run context first: a config
    the plan rejects is the plan's failure, and every later step of that run is not attempted (the run
    was never planned)."""
    try:
        ctx = build()
    except ConfigError as exc:
        rejected: Exception = exc
        if name != "plan" and manifest(run_dir) is None:
            rejected = NotAttempted(f"run {run_dir.run_id} was never planned (its config was rejected); nothing to do")
    else:
        return execute_group(ctx, name, engine) if isinstance(engine, list) else execute(ctx, name, engine)

    def fail() -> dict[str, Any]:
        raise rejected

    for e in engine if isinstance(engine, list) else ():
        with contextlib.suppress(NotAttempted, ConfigError):
            record(run_dir, name, e, fail)
    return record(run_dir, name, None if isinstance(engine, list) else engine, fail)


def record(run_dir: RunDir, name: str, engine: str | None, call: Callable[[], dict[str, Any]]) -> StepResult:
    """Run `call` as step `name` and write its outcome; also used by the deferred readiness wait. The step's
    progress document (tasks/state/progress.py) says it runs until then, and then how it ended."""
    with step_running(run_dir, name, [engine]) as progress:
        try:
            data = call()
        except NotAttempted as exc:
            write_outcome(run_dir, StepOutcome(step=name, engine=engine, status="not_attempted", detail=str(exc)))
            progress.end(engine, "not_attempted", str(exc))
            raise
        except Exception as exc:
            detail = desensitize(f"{type(exc).__name__}: {exc}")
            write_outcome(run_dir, StepOutcome(step=name, engine=engine, status="failed", detail=detail,
                                               trace=desensitize(traceback.format_exc(limit=5))))
            progress.end(engine, "failed", detail)
            raise
        write_outcome(run_dir, StepOutcome(step=name, engine=engine, status="ok"))
        progress.end(engine, "ok")
    log.info("step %s%s done: %s", f"{engine}/" if engine else "", name, desensitize(data))
    return StepResult(step=name, engine=engine, data=data)


def verdict(run_dir: RunDir, required: tuple[str, ...]) -> list[str]:
    """Why the run failed, one line each; empty when it succeeded. A run fails when any step failed,
    when a required run-level step did not complete (an archive that never wrote is a failed run,
    whatever the engines did), when a planned engine step, or an engine's deploy or teardown, left no
    outcome (its task never ran or never finished: a worker killed past its last retry leaves partial rows
    and no word), or when validation failed."""
    recorded = outcomes(run_dir)
    problems = [f"{o.where}: {o.detail}" for o in recorded if o.status == "failed"]
    done = {(o.engine, o.step) for o in recorded}
    planned_run = manifest(run_dir) or {}
    for engine in [e["name"] for e in planned_run.get("engines") or []]:
        # an engine task that never ran (its lane stopped, its process lost before it began) records nothing:
        # its later steps then only say "not ready", which must not pass as a run that measured the engine
        if (engine, "deploy") not in done:
            problems.append(f"{engine}/deploy: no outcome was recorded (its task never ran or never finished): "
                            "the engine was never deployed")
        if (engine, "teardown") not in done:
            problems.append(f"{engine}/teardown: no outcome was recorded (its task never ran or never finished): "
                            "the engine may still be running")
    for planned in planned_run.get("matrix") or []:
        if (planned["engine"], planned["scenario"]) not in done:
            problems.append(f"{planned['engine']}/{planned['scenario']}: planned, but no outcome was recorded "
                            "(its task never finished; its rows, if any, are partial)")
    run_level = {o.step: o for o in recorded if not o.engine}
    for name in required:
        outcome = run_level.get(name)
        if outcome is None:
            problems.append(f"run/{name}: never ran (a step before it failed)")
        elif outcome.status == "not_attempted":
            problems.append(f"run/{name}: not attempted ({outcome.detail})")
    if "archive" in required and (run_level.get("archive") is None or run_level["archive"].status != "ok"):
        problems.append("nothing of this run was archived")
    validation = run_dir.read_json(VALIDATION)
    if validation is None:  # validate never ran (said above), or ran and kept nothing
        if "validate" in run_level and run_level["validate"].status == "ok":
            problems.append("run/validate: no validation result was recorded")
    elif not validation.get("success"):
        problems.append("result tables failed validation (run archived under quarantine/)")
    return problems
