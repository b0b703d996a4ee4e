"""The pipeline's steps: one registry, one way to run a step and record how it ended.

A step is a transaction over the run's state (tasks/state.py): it takes the run context
(tasks/run.py) and, for a per-engine step, the engine's name, and returns a small JSON-able dict of
what it did. `execute(ctx, name, engine)` runs it and records its outcome (ok, skipped, failed with
the desensitized error, or not attempted), which the report and the run's verdict read. The DAG
(plugins/dayone_airflow/pipeline.py), the readiness sensor and `dayone step` all go through
`execute`, so a step run in a pod records its outcome exactly as a DAG task does.

plan -> pin -> per engine: deploy -> wait_ready -> startup_findings -> functional -> warmup ->
short, prefill, decode, rate -> capacity -> long_context, boundary -> prefix_cache -> teardown;
then [compare] -> validate -> archive -> report; `verdict` fails the run on any failure.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, Literal

from pydantic import BaseModel, Field

from tasks.config import ConfigError, RunConfig, read_config_file
from tasks.context import StepContext
from tasks.desensitize import desensitize
from tasks.run import NotAttempted, RunContext, load_config
from tasks.scenarios import EVIDENCE_SCENARIOS, PERF_SCENARIOS
from tasks.staging import RunDir
from tasks.state import (MANIFEST, PINNED, VALIDATION, StepOutcome, manifest, outcome_doc, outcomes, perf_summary_doc,
                         pinned, readiness, set_readiness, write_outcome)

log = logging.getLogger("dayone.steps")

__all__ = ["NotAttempted", "RunContext", "STEPS", "Step", "StepResult", "execute", "load_config", "verdict"]


# ---- the protocol ----------------------------------------------------------------------------------


class StepResult(BaseModel):
    """What a step did, as every caller receives it (an Airflow task returns it as its XCom)."""

    step: str
    engine: str | None = None
    status: Literal["ok", "skipped"] = "ok"
    detail: str = ""  # why it was skipped
    data: dict[str, Any] = Field(default_factory=dict)  # the step's own figures


StepFn = Callable[[RunContext, "str | None"], dict[str, Any]]


@dataclass(frozen=True)
class Step:
    name: str
    per_engine: bool
    run: StepFn
    enabled: Callable[[RunConfig], bool] = lambda cfg: True
    retries: int = 0  # Airflow retries: only for steps whose retry cannot lose or hide evidence
    scenario: bool = False  # a measured scenario: listed in the plan's matrix
    # A measurement is retried only after a try that ended without an outcome (its worker was killed):
    # a try that failed recorded its failure, and a retry would replace its rows, the evidence.
    retry_after_failure: bool = True


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


def _section_enabled(name: str) -> Callable[[RunConfig], bool]:
    return lambda cfg: bool(getattr(cfg.scenarios, name).enabled)


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
    ready: list[StepContext] = []
    for e in engines:
        try:
            ready.append(ctx.engine(e))
        except NotAttempted as exc:
            write_outcome(ctx.run_dir, StepOutcome(step=name, engine=e, status="not_attempted", detail=str(exc)))
    if not ready:
        raise NotAttempted(f"{name}: no engine of {', '.join(engines)} is ready")
    names = [r.endpoint.engine for r in ready]
    try:
        _failed_before(ctx, step, list(names))
        summaries = _measured(ctx, ready, name)
    except Exception as exc:
        for e in names:  # the engines were measured together: the failure is each one's
            with contextlib.suppress(Exception):
                record(ctx.run_dir, name, e, lambda exc=exc: _raise(exc))
        raise
    data: dict[str, Any] = {}
    failures: list[Exception] = []
    for e in names:  # every engine's outcome is recorded before the first failure is raised
        try:
            data[e] = record(ctx.run_dir, name, e, lambda e=e: _kept(ctx, e, name, summaries[e])).data
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
    """Run `call` as step `name` and write its outcome; also used by the deferred readiness wait."""
    try:
        data = call()
    except NotAttempted as exc:
        write_outcome(run_dir, StepOutcome(step=name, engine=engine, status="not_attempted", detail=str(exc)))
        raise
    except Exception as exc:
        write_outcome(run_dir, StepOutcome(
            step=name, engine=engine, status="failed", detail=desensitize(f"{type(exc).__name__}: {exc}"),
            trace=desensitize(traceback.format_exc(limit=5))))
        raise
    write_outcome(run_dir, StepOutcome(step=name, engine=engine, status="ok"))
    log.info("step %s%s done: %s", f"{engine}/" if engine else "", name, desensitize(data))
    return StepResult(step=name, engine=engine, data=data)


def verdict(run_dir: RunDir, required: tuple[str, ...]) -> list[str]:
    """Why the run failed, one line each; empty when it succeeded. A run fails when any step failed,
    when a required run-level step did not complete (an archive that never wrote is a failed run,
    whatever the engines did), when a planned engine step left no outcome (its task never finished:
    a worker killed past its last retry leaves partial rows and no word), or when validation failed."""
    recorded = outcomes(run_dir)
    problems = [f"{o.where}: {o.detail}" for o in recorded if o.status == "failed"]
    done = {(o.engine, o.step) for o in recorded}
    for planned in (manifest(run_dir) or {}).get("matrix") or []:
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
    validation = run_dir.read_json(VALIDATION, {}) or {}
    if not validation.get("success"):
        problems.append("result tables failed validation (run archived under quarantine/)")
    return problems


# ---- run-level steps ---------------------------------------------------------------------------


def plan(ctx: RunContext, _: None = None) -> dict[str, Any]:
    """Check what the run needs and record its plan in the manifest. Fails before any deploy: a
    placement the DAG cannot run, or an archive that cannot be reached (nothing measured could be kept)."""
    from tasks.lanes import design, positions

    cfg = ctx.config
    placed = positions(cfg)
    if ctx.archive_client is not None:
        ctx.s3()  # the DAG's client names the missing connection and its fix
    matrix = [{"engine": e.name, "scenario": s.name} for e in cfg.engines for s in STEPS.values()
              if s.scenario and s.enabled(cfg)]
    doc = {
        "run_id": ctx.run_id,
        "dayone_version": version("dayone"),
        "created_ts": time.time(),
        "model": cfg.model.model_dump(mode="json"),
        "target": cfg.target,
        "dry_run": cfg.dry_run,
        "engines": [e.model_dump(mode="json", exclude={"env"}) for e in cfg.engines],
        "scenarios": cfg.scenarios.model_dump(mode="json"),
        "slo": cfg.slo.model_dump(mode="json"),
        "matrix": matrix,
        "design": design(cfg),
        "positions": placed,
        "experiment": _experiment_record(cfg),
        "config": _without_env_values(cfg.model_dump(mode="json")),
    }
    ctx.run_dir.write_json(MANIFEST, doc)
    return {"run_id": ctx.run_id, "engines": [e.name for e in cfg.engines], "steps": len(matrix), "positions": placed}


def _experiment_record(cfg: RunConfig) -> dict[str, Any] | None:
    """The experiment as run: each variant's settings that differ from the base (secret env values withheld)."""
    if cfg.experiment is None:
        return None
    from tasks.experiment import differences

    exp = cfg.experiment
    base = cfg.engine(exp.base)

    def shown(path: str, value: Any) -> Any:
        from tasks.desensitize import REDACTED, secret_name

        return REDACTED if path.startswith("env.") and value is not None and secret_name(path[4:]) else value

    variants = {e.name: {p: shown(p, b) for p, (_, b) in differences(base, e).items()}
                for e in cfg.engines if e.name != exp.base}
    base_values = {p: shown(p, a) for e in cfg.engines if e.name != exp.base
                   for p, (a, _) in differences(base, e).items()}
    return {**exp.model_dump(mode="json"), "base_values": base_values, "variants": variants}


def _without_env_values(config: dict[str, Any]) -> dict[str, Any]:
    """The config for the manifest: engine environment values kept so the start can be repeated, those
    of secret-named variables withheld (tasks/desensitize.py `secret_name`)."""
    from tasks.desensitize import recorded_env

    for engine in config.get("engines", []):
        engine["env"] = recorded_env(engine.get("env") or {})
    return config


def pin_now(ctx: RunContext) -> dict[str, str]:
    """Resolve each engine's identity (image digests, or local command line and version) now."""
    cfg = ctx.config
    found = {e.name: ctx.target.pin(cfg, e) for e in cfg.engines}
    _same_image_across_variants(cfg, found)
    ctx.run_dir.write_json(PINNED, found)
    doc = manifest(ctx.run_dir) or {}
    doc["pinned"] = found
    ctx.run_dir.write_json(MANIFEST, doc)
    return {name: p["image_digest"] for name, p in found.items()}


def _same_image_across_variants(cfg: RunConfig, found: dict[str, dict[str, Any]]) -> None:
    """An experiment's variants run one image unless the image is a factor: a tag that moved between
    two resolutions would make the effect of a factor the effect of two images. (A local engine's
    digest is of its whole launch identity, settings included: it differs by design.)"""
    exp = cfg.experiment
    if exp is None or cfg.target != "kubernetes" or any(s in ("image", "digest") for s in (*(f.setting for f in exp.factors), *exp.allow_differences)):
        return
    base = found[exp.base].get("image_digest")
    for name, pin in found.items():
        if pin.get("image_digest") != base:
            raise ConfigError([(f"engines[{[e.name for e in cfg.engines].index(name)}].image",
                                f"{name} pinned {pin.get('image_digest')} but the base {exp.base} pinned {base}; "
                                "the image is not a factor of the experiment",
                                "pin both to one digest (engines[].digest), or declare image as a factor")])


def pin(ctx: RunContext, _: None = None) -> dict[str, Any]:
    """Pin now; a dated run (nightly, backfill) pins from the digest catalog's entry for its date."""
    if ctx.logical_date is None:
        return {"source": "pinned now", "digests": pin_now(ctx)}
    from tasks.catalog import pin_for_date

    return pin_for_date(ctx, pin_now)


def compare(ctx: RunContext, _: None = None) -> dict[str, Any]:
    """The nightly's regression check against the last good run and the reference (tasks/compare.py)."""
    ctx.planned()
    from tasks.compare import compare_run

    return compare_run(ctx.run_dir, ctx.config, ctx.s3(), ctx.accepted_run_ids)


def validate(ctx: RunContext, _: None = None) -> dict[str, Any]:
    ctx.planned()
    from tasks.validate import validate_run

    return validate_run(ctx.run_dir)


def archive(ctx: RunContext, _: None = None) -> dict[str, Any]:
    ctx.planned()
    from tasks.archive import archive_run

    ctx.read_api_keys()  # each is then scrubbed from every archived byte, whatever its shape
    return archive_run(ctx.run_dir, ctx.config, ctx.s3())


def report(ctx: RunContext, _: None = None) -> dict[str, Any]:
    ctx.planned()
    from tasks.report import publish_report

    ctx.read_api_keys()
    return publish_report(ctx.run_dir, ctx.config, ctx.s3())


def cleanup(ctx: RunContext, _: None = None) -> dict[str, Any]:
    """Delete DayOne's cluster objects older than kubernetes.cleanup_age_s: engines of killed runs,
    which never reached their teardown and would hold their GPUs forever."""
    deleted = ctx.target.cleanup(ctx.config)
    return {"deleted": deleted}


# ---- per-engine steps --------------------------------------------------------------------------


def deploy(ctx: RunContext, engine: str, launch: int = 0) -> dict[str, Any]:
    from tasks.targets.base import DeployError

    found = pinned(ctx.run_dir)
    if engine not in found:
        raise DeployError(f"engine {engine}: not pinned; the pin step must run first")
    set_readiness(ctx.run_dir, engine, False, "deploying")
    from tasks.scenarios.warmup import reset_shapes

    reset_shapes(ctx.run_dir, engine)
    dep = ctx.target.deploy(ctx.config, ctx.config.engine(engine), ctx.run_dir, found[engine], launch)
    return {"engine": engine, "image_digest": dep.image_digest}


def ready_timeout_s(cfg: RunConfig, engine: str) -> float:
    spec = cfg.engine(engine)
    if spec.ready_timeout_s is not None:
        return spec.ready_timeout_s
    if cfg.target == "kubernetes":
        return float(cfg.kubernetes.startup_timeout_s)
    # A local engine starts in seconds; a simulator profile may add a startup delay.
    return 120.0 + float(spec.sim_profile.get("startup_delay_s", 0))


def wait_ready(ctx: RunContext, engine: str) -> dict[str, Any]:
    """Poll until the engine serves (tasks/readiness.py). The DAG waits for a Kubernetes engine with
    the deferrable trigger instead, which ends in `readiness_reached` just as this does."""
    from tasks.targets.base import DeployError

    dep = ctx.deployment(engine)
    if dep.handle.get("dry_run"):
        raise NotAttempted(f"engine {engine}: dry run, nothing deployed (manifests in {dep.handle.get('rendered')})")
    started = time.monotonic()
    try:
        state = ctx.target.wait_ready(ctx.config, dep, ready_timeout_s(ctx.config, engine), ctx.endpoint_access(engine))
    except DeployError as exc:
        return readiness_reached(ctx, engine, False, str(exc), time.monotonic() - started)
    return readiness_reached(ctx, engine, True, state.detail, time.monotonic() - started)


def readiness_reached(ctx: RunContext, engine: str, ready: bool, detail: str, waited_s: float) -> dict[str, Any]:
    """Record the end of a readiness wait; a failed wait raises (the step fails, naming why)."""
    from tasks.targets.base import DeployError

    set_readiness(ctx.run_dir, engine, ready, detail, round(waited_s, 3))
    if not ready:
        raise DeployError(detail)
    from tasks.evidence.restarts import record_cold_start

    finding = record_cold_start(ctx, engine)  # restarts while it loaded, judged now that it serves
    return {"engine": engine, "ready": True, "waited_s": round(waited_s, 3),
            "restarts_before_ready": finding["line"] if finding else None}


def startup_findings(ctx: RunContext, engine: str) -> dict[str, Any]:
    from tasks.evidence.startup_facts import record_startup_facts

    ectx = ctx.engine(engine)
    text = ctx.target.startup_log(ctx.deployment(engine))
    rows = startup_finding_rows(ectx, text)
    with ctx.run_dir.rows("startup_findings", engine, "startup") as out:
        for row in rows:
            out.write(row)
    from tasks.evidence.revision import record_served_revision

    served = record_served_revision(ctx, engine)  # which weights: the manifest's served_revision
    return {"engine": engine, "findings": len(rows), **record_startup_facts(ctx, engine, text),
            "served_revision": served["served"]}


def startup_finding_rows(ectx: StepContext, text: str) -> list[dict[str, Any]]:
    """Rows of the startup_findings table from the engine's startup log, read by its adapter."""
    return [{**ectx.endpoint.row_keys("startup"), **f} for f in ectx.endpoint.adapter.scan_startup_log(text)]


def functional(ctx: RunContext, engine: str) -> dict[str, Any]:
    from tasks.checks import run_functional

    ectx = ctx.engine(engine)

    def run() -> dict[str, Any]:
        return {"engine": engine, **check_counts([r["outcome"] for r in run_functional(ectx)])}

    return _watched(ctx, ectx, "functional", run)


def check_counts(outcomes: list[str]) -> dict[str, int]:
    """Checks by outcome, under keys no log masker takes for a secret (a key `pass` was shown redacted)."""
    return {"checks_passed": outcomes.count("pass"), "checks_failed": outcomes.count("fail"),
            "checks_not_applicable": outcomes.count("not_applicable")}


def warmup(ctx: RunContext, engine: str) -> dict[str, Any]:
    """One round over every (input, output, concurrency) shape of the run before measuring."""
    from tasks.scenarios.warmup import run_warmup

    ectx = ctx.engine(engine)
    return _watched(ctx, ectx, "warmup", lambda: run_warmup(ectx))


def _perf(scenario: str) -> StepFn:
    def perf(ctx: RunContext, engine: str) -> dict[str, Any]:
        return _kept(ctx, engine, scenario, _measured(ctx, [ctx.engine(engine)], scenario)[engine])

    perf.__name__ = scenario
    return perf


class RequestsFailed(RuntimeError):
    """Most of a performance step's measured requests failed: its figures are of the few that did not."""


def _kept(ctx: RunContext, engine: str, scenario: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Keep a performance scenario's summary for the report; the step's result. A step whose measured
    requests failed above `step_failed_share_max` fails after that, naming how many and why."""
    from tasks.load.stats import failed_requests

    ctx.run_dir.write_json(perf_summary_doc(engine, scenario), summary)
    rounds = [r for r in ctx.run_dir.read_rows("rounds", engine) if r.get("scenario") == scenario]
    reason = failed_requests(rounds, ctx.config.step_failed_share_max,
                             lambda: [r.get("error") for r in ctx.run_dir.read_rows("requests", engine)
                                      if r.get("scenario") == scenario and r.get("status") != "ok"])
    if reason:
        raise RequestsFailed(reason)  # desensitized where the outcome is recorded
    return {"engine": engine, "scenario": scenario, "ok": True, "engine_restarted": summary["engine_restarted"]}


def _measured(ctx: RunContext, ready: list[StepContext], scenario: str) -> dict[str, dict[str, Any]]:
    """A performance scenario over engines up together, its rounds nested in `measurement.launches`
    starts of every engine (tasks/scenarios/perf.py): each launch after the first starts them afresh
    (`_relaunch`), each launch's rounds run between restart readings of their own, and each engine's
    summary lists its launches with their readiness waits."""
    from tasks.scenarios.perf import run_perf_interleaved

    names = [r.endpoint.engine for r in ready]
    launched = {e: [_launch_record(ctx, e, 0, readiness(ctx.run_dir, e).waited_s)] for e in names}
    summaries = run_perf_interleaved(
        ready, scenario, ctx.config.measurement.launches,
        relaunch=lambda launch: _relaunch(ctx, names, scenario, launch, launched),
        watch=lambda ectxs, launch, run: _watched_all(ctx, ectxs, scenario, run, launch))
    return {e: {**summaries[e], "launches": launched[e]} for e in names}


def _relaunch(ctx: RunContext, engines: list[str], scenario: str, launch: int,
              launched: dict[str, list[dict[str, Any]]]) -> list[StepContext]:
    """Start every engine of a scenario afresh for launch `launch`: all torn down first (an old process
    may hold the memory the new one needs), then deployed and readied by the deploy and readiness steps'
    own code (a new process locally, a fresh rollout on Kubernetes), then warmed on the scenario's shapes.
    An engine that never serves again fails the scenario, naming it."""
    from tasks.scenarios.warmup import run_warmup, scenario_shapes

    for e in engines:
        ctx.target.teardown(ctx.config, e, ctx.run_dir)
    for e in engines:
        deploy(ctx, e, launch)
    for e in engines:
        waited = wait_ready(ctx, e)
        launched[e].append(_launch_record(ctx, e, launch, waited["waited_s"]))
    ectxs = [ctx.engine(e) for e in engines]
    for c in ectxs:  # the first encounter of each shape on the new process is a warmup round, as on launch 0
        run_warmup(c, scenario_shapes(ctx.config, scenario), launch=launch, scenario=scenario)
    log.info("%s: launch %d of %d started %s", scenario, launch, ctx.config.measurement.launches, ", ".join(engines))
    return ectxs


def _launch_record(ctx: RunContext, engine: str, launch: int, ready_waited_s: float | None) -> dict[str, Any]:
    """One start of an engine: its index, the readiness wait, and the process (local) or rollout it was."""
    handle = ctx.deployment(engine).handle
    return {"launch": launch, "ready_waited_s": ready_waited_s, "pid": handle.get("pid"),
            "deployment": handle.get("deployment")}


def _watched_all(ctx: RunContext, ectxs: list[StepContext], step: str,
                 run: Callable[[], dict[str, dict[str, Any]]], launch: int = 0) -> dict[str, dict[str, Any]]:
    """`_watched` for engines measured together: each engine's restarts are read before and after the
    step (or one launch's block of it), and each engine's summary says whether it restarted."""
    if not ectxs:
        return run()
    first, rest = ectxs[0], ectxs[1:]
    engine = first.endpoint.engine
    box: dict[str, dict[str, Any]] = {}

    def inner() -> dict[str, Any]:
        box.update(_watched_all(ctx, rest, step, run, launch))
        return dict(box[engine])

    watched = _watched(ctx, first, step, inner, launch=launch)
    box[engine] = {**box[engine], "engine_restarted": watched["engine_restarted"], "restarts": watched["restarts"]}
    return box


def capacity(ctx: RunContext, engine: str) -> dict[str, Any]:
    """The highest load whose goodput share meets the target under the run's SLO (tasks/scenarios/capacity.py)."""
    from tasks.scenarios.capacity import run_capacity

    ectx = ctx.engine(engine)
    result = _watched(ctx, ectx, "capacity", lambda: run_capacity(ectx))
    ctx.run_dir.write_json(perf_summary_doc(engine, "capacity"), result)
    return {"engine": engine, "outcome": result["outcome"], "capacity": result["capacity"],
            "probes": len(result["probes"]), "engine_restarted": result["engine_restarted"]}


def long_context(ctx: RunContext, engine: str) -> dict[str, Any]:
    from tasks.evidence.needles import run_long_context

    ectx = ctx.engine(engine)

    def run() -> dict[str, Any]:
        rows = run_long_context(ectx)
        return {"engine": engine, "needles": len(rows), "passed": sum(bool(r.get("passed")) for r in rows)}

    return _watched(ctx, ectx, "long_context", run)


def boundary(ctx: RunContext, engine: str) -> dict[str, Any]:
    from tasks.evidence.boundary import run_boundary

    ectx = ctx.engine(engine)
    restarts = ctx.restart_count(engine)
    return _watched(ctx, ectx, "boundary", lambda: {"engine": engine, "rows": len(run_boundary(ectx, restarts))},
                    restarts)


def prefix_cache(ctx: RunContext, engine: str) -> dict[str, Any]:
    from tasks.evidence.cache import run_prefix_cache

    ectx = ctx.engine(engine)
    restarts = ctx.restart_count(engine)
    return _watched(ctx, ectx, "prefix_cache",
                    lambda: {"engine": engine, "verdict": run_prefix_cache(ectx, restarts).get("verdict")}, restarts)


def teardown(ctx: RunContext, engine: str) -> dict[str, Any]:
    deleted = ctx.target.teardown(ctx.config, engine, ctx.run_dir)
    return {"engine": engine, "torn_down": True, "deleted": list(deleted or [])}


def _watched(ctx: RunContext, ectx: StepContext, step: str, run: Callable[[], dict[str, Any]],
             restarts: Callable[[], int | None] | None = None, launch: int = 0) -> dict[str, Any]:
    """Run an engine step between restart readings (tasks/evidence/restarts.py): a restart during
    it is a failed `engine_restarts` check naming the step, and its result says `engine_restarted`."""
    from tasks.evidence.restarts import watch_step

    return watch_step(ectx, step, restarts or ctx.restart_count(ectx.endpoint.engine), run, launch)


# ---- the registry --------------------------------------------------------------------------------

_RUN_STEPS = [
    Step("plan", False, plan),
    Step("pin", False, pin, retries=2),  # a registry hiccup; pinning writes whole documents
    Step("cleanup", False, cleanup, enabled=lambda cfg: cfg.target == "kubernetes" and not cfg.dry_run, retries=2),
]
_ENGINE_STEPS = [
    Step("deploy", True, deploy, retries=1),  # a retry first removes what the failed try made
    Step("wait_ready", True, wait_ready),
    Step("startup_findings", True, startup_findings, scenario=True),
    Step("functional", True, functional, enabled=_section_enabled("functional"), scenario=True),
    Step("warmup", True, warmup, enabled=lambda cfg: cfg.scenarios.warmup, scenario=True),
    # A measurement is retried only when its worker died mid-try (see retry_after_failure).
    *[Step(s, True, _perf(s), enabled=_section_enabled(s), scenario=True, retries=2, retry_after_failure=False)
      for s in PERF_SCENARIOS],
    Step("capacity", True, capacity, enabled=_section_enabled("capacity"), scenario=True),
    Step("long_context", True, long_context, enabled=_section_enabled("long_context"), scenario=True),
    Step("boundary", True, boundary, enabled=_section_enabled("boundary"), scenario=True),
    Step("prefix_cache", True, prefix_cache, enabled=_section_enabled("prefix_cache"), scenario=True),
    Step("teardown", True, teardown, retries=2),  # idempotent
]
_AFTER_STEPS = [
    Step("compare", False, compare, retries=2),
    Step("validate", False, validate, retries=1),
    Step("archive", False, archive, retries=3),  # write-once objects: a retry skips what landed
    Step("report", False, report, retries=3),
]
STEPS: dict[str, Step] = {s.name: s for s in (*_RUN_STEPS, *_ENGINE_STEPS, *_AFTER_STEPS)}
# The engine steps between readiness and teardown, in the order the DAG chains them.
SCENARIO_STEPS = tuple(s.name for s in _ENGINE_STEPS if s.scenario)
# Run-level steps every run must complete for its verdict; the nightly adds compare.
REQUIRED_RUN_STEPS = ("plan", "pin", "validate", "archive", "report")
assert set(EVIDENCE_SCENARIOS) <= set(SCENARIO_STEPS)


# ---- `dayone step` -------------------------------------------------------------------------------

NOT_ATTEMPTED_EXIT = 99  # the runner pod's skip_on_exit_code: a step not attempted is a skipped task


def register(sub: Any) -> None:
    p = sub.add_parser("step", help="run one pipeline step (as a DAG task does) and record its outcome")
    p.add_argument("name", choices=list(STEPS))
    p.add_argument("--config", required=True, help="run config, YAML or JSON file")
    p.add_argument("--run-id", required=True)
    p.add_argument("--engine")
    p.set_defaults(run=_run_cli)


def _engine_option_error(name: str, engine: str | None, cfg: RunConfig) -> str | None:
    """What is wrong with --engine for step `name`, in the user's words; None when it fits."""
    engines = ", ".join(e.name for e in cfg.engines)
    per_engine = STEPS[name].per_engine
    if not per_engine and engine is not None:
        return f"{name} is a run-level step and takes no --engine: drop --engine {engine}"
    if per_engine and engine is None:
        return f"{name} is a per-engine step: give --engine NAME (the config's engines: {engines})"
    if engine is not None and engine not in {e.name for e in cfg.engines}:
        return f"--engine {engine} is not an engine of the config (its engines: {engines})"
    return None


def _run_cli(args: Any) -> int:
    from tasks.archive import client_from_env

    config = load_config(read_config_file(args.config), args.run_id)  # bad config: exit 2, nothing written
    problem = _engine_option_error(args.name, args.engine, config)
    if problem:
        print(f"dayone step {args.name}: {problem}", file=sys.stderr)
        return 2
    ctx = RunContext.build(config, args.run_id, archive_client=client_from_env)
    try:
        result = execute(ctx, args.name, args.engine)
    except NotAttempted as exc:
        print(f"dayone step {args.name}: not attempted: {exc}", file=sys.stderr)
        return NOT_ATTEMPTED_EXIT
    print(json.dumps(result.model_dump(mode="json"), indent=2, default=str))
    return 0
