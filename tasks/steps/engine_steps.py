"""The per-engine steps' bodies: deploy, readiness, the checks, the measurements and the evidence
steps, each run between restart readings, and the replicated launches of a performance scenario
(docs/PROTOCOL.md, "Launches")."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from tasks.config import RunConfig
from tasks.engines.context import EngineContext
from tasks.steps.context import NotAttempted, RunContext
from tasks.state.documents import perf_summary_doc, pinned, readiness, set_readiness
from tasks.steps.protocol import StepFn

log = logging.getLogger("dayone.steps")


def deploy(ctx: RunContext, engine: str, launch: int = 0) -> dict[str, Any]:
    from tasks.engines.readiness import DeployError

    found = pinned(ctx.run_dir)
    if engine not in found:
        raise DeployError(f"engine {engine}: not pinned; the pin step must run first")
    set_readiness(ctx.run_dir, engine, False, "deploying")
    from tasks.scenarios.warmup import reset_shapes

    reset_shapes(ctx.run_dir, engine)
    from tasks.evidence.revision import served_config

    config = served_config(ctx.config, ctx.run_dir)  # model.revision the commit the pin step resolved
    dep = ctx.target.deploy(config, config.engine(engine), ctx.run_dir, found[engine], launch)
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
    """Poll until the engine serves (tasks/engines/readiness.py). The DAG waits for a Kubernetes engine with
    the deferrable trigger instead, which ends in `readiness_reached` just as this does."""
    from tasks.engines.readiness import DeployError

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
    from tasks.engines.readiness import DeployError

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


def startup_finding_rows(ectx: EngineContext, text: str) -> list[dict[str, Any]]:
    """Rows of the startup_findings table from the engine's startup log, read by its adapter."""
    return [{**ectx.endpoint.row_keys("startup"), **f} for f in ectx.endpoint.adapter.scan_startup_log(text)]


def functional(ctx: RunContext, engine: str) -> dict[str, Any]:
    from tasks.checks import run_functional

    ectx = ctx.engine(engine)

    def run() -> dict[str, Any]:
        return {"engine": engine, **check_counts([r["outcome"] for r in run_functional(ectx)])}

    return _watched(ctx, ectx, "functional", run)


def openwebui(ctx: RunContext, engine: str) -> dict[str, Any]:
    """OpenWebUI in front of the engine, as a person uses it; its verdicts in the `checks` table (tasks/openwebui/)."""
    from tasks.openwebui.checks import run_openwebui

    ectx = ctx.engine(engine)
    start = None
    if ctx.config.target == "kubernetes":  # a pod beside the engine, reaching it through its Service
        from tasks.openwebui.cluster import openwebui_beside_engine

        def start():  # noqa: ANN202
            return openwebui_beside_engine(ctx, engine)

    def run() -> dict[str, Any]:
        return {"engine": engine, **check_counts([r["outcome"] for r in run_openwebui(ectx, start)])}

    return _watched(ctx, ectx, "openwebui", run)


def quality(ctx: RunContext, engine: str) -> dict[str, Any]:
    """The generated task set at greedy decoding, each answer's verdict in the `quality` table; then the fixed
    text's NLL per token at each length in the `loglik` table (tasks/quality/)."""
    from tasks.quality.loglik import run_loglik
    from tasks.quality.run import run_quality

    ectx = ctx.engine(engine)

    def run() -> dict[str, Any]:
        rows = run_quality(ectx)
        scored = run_loglik(ectx)
        return {"engine": engine, "items": len(rows), "correct": sum(bool(r["correct"]) for r in rows),
                "nll_lengths_scored": sum(r["status"] == "ok" for r in scored)}

    return _watched(ctx, ectx, "quality", run)


def check_counts(outcomes: list[str]) -> dict[str, int]:
    """Checks by outcome, under keys no log masker takes for a secret (a key `pass` was shown redacted)."""
    return {"checks_passed": outcomes.count("pass"), "checks_failed": outcomes.count("fail"),
            "checks_not_applicable": outcomes.count("not_applicable")}


def warmup(ctx: RunContext, engine: str) -> dict[str, Any]:
    """One round over every shape of the run's warmup matrix before measuring (its trace's and dataset's
    length buckets read where the scenarios read them)."""
    from tasks.scenarios.warmup import run_warmup

    ectx = ctx.engine(engine)
    s3 = ctx.s3 if ctx.archive_client is not None else None
    return _watched(ctx, ectx, "warmup", lambda: run_warmup(ectx, s3=s3))


def perf_step(scenario: str) -> StepFn:
    """The step of performance scenario `scenario` for one engine measured alone."""

    def perf(ctx: RunContext, engine: str) -> dict[str, Any]:
        return keep_perf_summary(ctx, engine, scenario, measure_together(ctx, [ctx.engine(engine)], scenario)[engine])

    perf.__name__ = scenario
    return perf


class RequestsFailed(RuntimeError):
    """Most of a performance step's measured requests failed: its figures are of the few that did not."""


def fail_on_failed_requests(ctx: RunContext, engine: str, scenario: str, requests: str = "requests") -> None:
    """A measuring step whose rounds failed more than `step_failed_share_max` of their requests fails, with
    the reason (its requests' errors, from the `requests` table named, desensitized where the outcome is
    recorded)."""
    from tasks.stats.figures import failed_requests

    rounds = [r for r in ctx.run_dir.read_rows("rounds", engine) if r.get("scenario") == scenario]
    reason = failed_requests(rounds, ctx.config.step_failed_share_max,
                             lambda: [r.get("error") for r in ctx.run_dir.read_rows(requests, engine)
                                      if r.get("scenario") == scenario and r.get("status") != "ok"])
    if reason:
        raise RequestsFailed(reason)


def keep_perf_summary(ctx: RunContext, engine: str, scenario: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Keep a performance scenario's summary for the report; the step's result. A step whose measured
    requests failed above `step_failed_share_max` fails after that, naming how many and why."""
    ctx.run_dir.write_json(perf_summary_doc(engine, scenario), summary)
    fail_on_failed_requests(ctx, engine, scenario)
    return {"engine": engine, "scenario": scenario, "ok": True, "engine_restarted": summary["engine_restarted"]}


def measure_together(ctx: RunContext, ready: list[EngineContext], scenario: str) -> dict[str, dict[str, Any]]:
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
              launched: dict[str, list[dict[str, Any]]]) -> list[EngineContext]:
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


def _watched_all(ctx: RunContext, ectxs: list[EngineContext], step: str,
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


def trace(ctx: RunContext, engine: str) -> dict[str, Any]:
    """The configured trace window replayed (tasks/scenarios/trace.py); its summary kept for the report. Fails
    like a performance step on failed requests."""
    from tasks.scenarios.trace import run_trace

    ectx = ctx.engine(engine)
    s3 = ctx.s3 if ctx.archive_client is not None else None
    result = _watched(ctx, ectx, "trace", lambda: run_trace(ectx, s3))
    ctx.run_dir.write_json(perf_summary_doc(engine, "trace"), result)
    fail_on_failed_requests(ctx, engine, "trace", "trace_requests")
    return {"engine": engine, "rounds": len(result["rounds"]), "behind": result["behind"],
            "engine_restarted": result["engine_restarted"]}


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
    from tasks.evidence.engine_log import keep_engine_log

    kept = keep_engine_log(ctx, engine)  # the engine's whole log, before it goes with the engine
    deleted = ctx.target.teardown(ctx.config, engine, ctx.run_dir)
    return {"engine": engine, "torn_down": True, "deleted": list(deleted or []), "log_kept": kept["kept"]}


def _watched(ctx: RunContext, ectx: EngineContext, step: str, run: Callable[[], dict[str, Any]],
             restarts: Callable[[], int | None] | None = None, launch: int = 0) -> dict[str, Any]:
    """Run an engine step between restart readings (tasks/evidence/restarts.py): a restart during
    it is a failed `engine_restarts` check naming the step, and its result says `engine_restarted`."""
    from tasks.evidence.restarts import watch_step

    return watch_step(ectx, step, restarts or ctx.restart_count(ectx.endpoint.engine), run, launch)
