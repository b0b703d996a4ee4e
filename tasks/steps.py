"""The pipeline's steps, each a transaction over the run directory.

The DAG calls these (one Airflow task each) and so does `dayone step NAME`, so a Kubernetes pod
can run any of them. Each step takes the run config as a dict (as the trigger form gives it), the
run id, and, for per-engine steps, the engine name; each returns a small JSON-able result.

pin -> deploy -> wait_ready -> startup_findings -> functional -> short, prefill, decode, rate ->
long_context, boundary -> prefix_cache -> teardown;  then validate -> archive -> report.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from tasks.config import RunConfig, parse_run_config, read_config_file
from tasks.context import StepContext, endpoint_for
from tasks.staging import RunDir
from tasks.targets.base import Deployment, DeployError, target_for

log = logging.getLogger("dayone.steps")

PERF_SCENARIOS = ("short", "prefill", "decode", "rate")
ENGINE_STEPS = (
    "deploy", "wait_ready", "startup_findings", "functional", "warmup", *PERF_SCENARIOS,
    "long_context", "boundary", "prefix_cache", "teardown",
)


class NotAttempted(RuntimeError):
    """The step was not attempted, e.g. its engine never became ready; the message says why."""


def load_config(config: dict[str, Any] | RunConfig, run_id: str) -> RunConfig:
    if isinstance(config, RunConfig):
        return config if config.run_id == run_id else config.model_copy(update={"run_id": run_id})
    return parse_run_config({**config, "run_id": run_id})


# ---- run-level steps ---------------------------------------------------------------------------


def plan(config: dict[str, Any], run_id: str) -> dict[str, Any]:
    """Validate the config and record the run's plan in its manifest. Fails before any deploy."""
    cfg = load_config(config, run_id)
    run_dir = RunDir(run_id)
    matrix = [
        {"engine": e.name, "scenario": s}
        for e in cfg.engines
        for s in ENGINE_STEPS
        if s not in ("deploy", "wait_ready", "teardown") and _enabled(cfg, s)
    ]
    manifest = {
        "run_id": run_id,
        "dayone_version": version("dayone"),
        "created_ts": time.time(),
        "model": cfg.model.model_dump(mode="json"),
        "target": cfg.target,
        "dry_run": cfg.dry_run,
        "engines": [e.model_dump(mode="json", exclude={"env"}) for e in cfg.engines],
        "scenarios": cfg.scenarios.model_dump(mode="json"),
        "slo": cfg.slo.model_dump(mode="json"),
        "matrix": matrix,
        "config": _without_env_values(cfg.model_dump(mode="json")),
    }
    run_dir.write_json("manifest.json", manifest)
    return {"run_id": run_id, "engines": [e.name for e in cfg.engines], "steps": len(matrix)}


def _without_env_values(config: dict[str, Any]) -> dict[str, Any]:
    """The config for the manifest: engine environment values may be credentials, so only names stay."""
    for engine in config.get("engines", []):
        engine["env"] = {name: "<redacted>" for name in engine.get("env") or {}}
    return config


def _enabled(cfg: RunConfig, step: str) -> bool:
    if step == "startup_findings":
        return True
    if step == "warmup":
        return cfg.scenarios.warmup
    section = getattr(cfg.scenarios, step, None)
    return bool(section is None or getattr(section, "enabled", True))


def pin(config: dict[str, Any], run_id: str) -> dict[str, Any]:
    """Resolve each engine's identity (image digests, or local command line and version)."""
    cfg = load_config(config, run_id)
    run_dir = RunDir(run_id)
    target = target_for(cfg)
    pinned = {e.name: target.pin(cfg, e) for e in cfg.engines}
    run_dir.write_json("pinned.json", pinned)
    manifest = run_dir.read_json("manifest.json", {})
    manifest["pinned"] = pinned
    run_dir.write_json("manifest.json", manifest)
    return {name: p["image_digest"] for name, p in pinned.items()}


# ---- per-engine steps --------------------------------------------------------------------------


def deploy(config: dict[str, Any], run_id: str, engine: str) -> dict[str, Any]:
    cfg = load_config(config, run_id)
    run_dir = RunDir(run_id)
    pinned = run_dir.read_json("pinned.json", {})
    if engine not in pinned:
        raise DeployError(f"engine {engine}: not pinned; the pin step must run first")
    run_dir.write_json(f"state/{engine}/ready.json", {"ready": False, "detail": "deploying"})
    _reset_shapes(run_dir, engine)
    dep = target_for(cfg).deploy(cfg, cfg.engine(engine), run_dir, pinned[engine])
    return {"engine": engine, "image_digest": dep.image_digest}


def wait_ready(config: dict[str, Any], run_id: str, engine: str, timeout_s: float | None = None,
               sync_kubernetes: bool = False) -> dict[str, Any]:
    """Poll until the engine serves. On Kubernetes the DAG waits with a deferrable sensor instead
    (no worker slot held for a 30-minute cold start); `sync_kubernetes` polls here (CLI, tests)."""
    cfg = load_config(config, run_id)
    run_dir = RunDir(run_id)
    dep = _deployment(run_dir, engine)
    if dep.handle.get("dry_run"):
        raise NotAttempted(f"engine {engine}: dry run, nothing deployed (manifests in {dep.handle.get('rendered')})")
    if cfg.target == "kubernetes" and not sync_kubernetes:
        raise NotAttempted(f"engine {engine}: readiness on Kubernetes is waited for by the deferrable sensor")
    timeout = timeout_s if timeout_s is not None else _ready_timeout(cfg, engine)
    started = time.monotonic()
    try:
        state = target_for(cfg).wait_ready(cfg, dep, timeout)
    except DeployError as exc:
        run_dir.write_json(f"state/{engine}/ready.json", {"ready": False, "detail": str(exc)})
        raise
    record_ready(run_dir, engine, time.monotonic() - started, state.detail)
    return {"engine": engine, "ready": True, "waited_s": round(time.monotonic() - started, 3)}


def record_ready(run_dir: RunDir, engine: str, waited_s: float, detail: str) -> None:
    """Mark the engine as serving; the scenario steps only run for a ready engine."""
    run_dir.write_json(f"state/{engine}/ready.json", {"ready": True, "waited_s": waited_s, "detail": detail})


def _ready_timeout(cfg: RunConfig, engine: str) -> float:
    spec = cfg.engine(engine)
    if spec.ready_timeout_s is not None:
        return spec.ready_timeout_s
    if cfg.target == "kubernetes":
        return float(cfg.kubernetes.startup_timeout_s)
    # A local engine starts in seconds; a simulator profile may add a startup delay.
    return 120.0 + float(spec.sim_profile.get("startup_delay_s", 0))


def startup_findings(config: dict[str, Any], run_id: str, engine: str) -> dict[str, Any]:
    ctx = _context(config, run_id, engine)
    dep = _deployment(ctx.run_dir, engine)
    text = target_for(ctx.config).startup_log(dep)
    findings = ctx.endpoint.adapter.scan_startup_log(text)
    with ctx.run_dir.rows("startup_findings", engine, "startup") as out:
        for f in findings:
            out.write({**ctx.endpoint.row_keys("startup"), **f})
    return {"engine": engine, "findings": len(findings)}


def functional(config: dict[str, Any], run_id: str, engine: str) -> dict[str, Any]:
    ctx = _context(config, run_id, engine)
    if not ctx.config.scenarios.functional.enabled:
        return {"engine": engine, "skipped": "functional checks disabled"}
    from tasks.checks import run_functional

    def run() -> dict[str, Any]:
        outcomes = [r["outcome"] for r in run_functional(ctx)]
        return {"engine": engine, **{o: outcomes.count(o) for o in ("pass", "fail", "not_applicable")}}

    return _watched(ctx, "functional", run)


def warmup(config: dict[str, Any], run_id: str, engine: str) -> dict[str, Any]:
    """One round over every (input, output, concurrency) shape of the run before measuring."""
    ctx = _context(config, run_id, engine)
    from tasks.scenarios.warmup import run_warmup

    return _watched(ctx, "warmup", lambda: run_warmup(ctx))


def perf(config: dict[str, Any], run_id: str, engine: str, scenario: str) -> dict[str, Any]:
    ctx = _context(config, run_id, engine)
    if not getattr(ctx.config.scenarios, scenario).enabled:
        return {"engine": engine, "scenario": scenario, "skipped": f"{scenario} disabled"}
    from tasks.scenarios.perf import run_perf

    summary = _watched(ctx, scenario, lambda: run_perf(ctx, scenario))
    ctx.run_dir.write_json(f"summaries/{engine}/{scenario}.json", summary)
    return {"engine": engine, "scenario": scenario, "ok": True, "engine_restarted": summary["engine_restarted"]}


def long_context(config: dict[str, Any], run_id: str, engine: str) -> dict[str, Any]:
    ctx = _context(config, run_id, engine)
    if not ctx.config.scenarios.long_context.enabled:
        return {"engine": engine, "skipped": "long_context disabled"}
    from tasks.evidence.needles import run_long_context

    def run() -> dict[str, Any]:
        rows = run_long_context(ctx)
        return {"engine": engine, "needles": len(rows), "passed": sum(bool(r.get("passed")) for r in rows)}

    return _watched(ctx, "long_context", run)


def boundary(config: dict[str, Any], run_id: str, engine: str) -> dict[str, Any]:
    ctx = _context(config, run_id, engine)
    if not ctx.config.scenarios.boundary.enabled:
        return {"engine": engine, "skipped": "boundary disabled"}
    from tasks.evidence.boundary import run_boundary

    restarts = _restart_count(ctx)
    return _watched(ctx, "boundary", lambda: {"engine": engine, "rows": len(run_boundary(ctx, restarts))})


def prefix_cache(config: dict[str, Any], run_id: str, engine: str) -> dict[str, Any]:
    ctx = _context(config, run_id, engine)
    if not ctx.config.scenarios.prefix_cache.enabled:
        return {"engine": engine, "skipped": "prefix_cache disabled"}
    from tasks.evidence.cache import run_prefix_cache

    restarts = _restart_count(ctx)
    return _watched(ctx, "prefix_cache",
                    lambda: {"engine": engine, "verdict": run_prefix_cache(ctx, restarts).get("verdict")})


def teardown(config: dict[str, Any], run_id: str, engine: str) -> dict[str, Any]:
    cfg = load_config(config, run_id)
    target_for(cfg).teardown(cfg, engine, RunDir(run_id))
    return {"engine": engine, "torn_down": True}


# ---- after the engines ---------------------------------------------------------------------------


def _planned(run_id: str) -> RunDir:
    run_dir = RunDir(run_id)
    if run_dir.read_json("manifest.json") is None:
        raise NotAttempted(f"run {run_id} was never planned (its config was rejected); nothing to do")
    return run_dir


def validate(config: dict[str, Any], run_id: str) -> dict[str, Any]:
    run_dir = _planned(run_id)
    from tasks.validate import validate_run

    return validate_run(run_dir)


def archive(config: dict[str, Any], run_id: str, s3: Any) -> dict[str, Any]:
    """Upload the run; `s3` is a boto3 S3 client built from the archive connection."""
    run_dir = _planned(run_id)
    from tasks.archive import archive_run

    return archive_run(run_dir, load_config(config, run_id), s3)


def report(config: dict[str, Any], run_id: str, s3: Any) -> dict[str, Any]:
    run_dir = _planned(run_id)
    from tasks.report import publish_report

    return publish_report(run_dir, load_config(config, run_id), s3)


# ---- helpers -------------------------------------------------------------------------------------


def _deployment(run_dir: RunDir, engine: str) -> Deployment:
    dep = Deployment.load(run_dir, engine)
    if dep is None:
        raise NotAttempted(f"engine {engine}: not deployed")
    return dep


def _context(config: dict[str, Any], run_id: str, engine: str) -> StepContext:
    cfg = load_config(config, run_id)
    run_dir = RunDir(run_id)
    ready = run_dir.read_json(f"state/{engine}/ready.json", {})
    if not ready.get("ready"):
        raise NotAttempted(f"engine {engine}: not ready ({ready.get('detail', 'never deployed')}); step not attempted")
    dep = _deployment(run_dir, engine)
    return StepContext(cfg, endpoint_for(cfg, engine, dep.base_url, dep.image_digest), run_dir)


def _restart_count(ctx: StepContext) -> Callable[[], int | None]:
    dep = _deployment(ctx.run_dir, ctx.endpoint.engine)
    target = target_for(ctx.config)
    return lambda: target.restart_count(dep)


def _watched(ctx: StepContext, step: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run an engine step between restart readings (tasks/evidence/restarts.py): a restart during
    it is a failed `engine_restarts` check naming the step, and its result says `engine_restarted`."""
    from tasks.evidence.restarts import watch_step

    return watch_step(ctx, step, _restart_count(ctx), run)


def _reset_shapes(run_dir: RunDir, engine: str) -> None:
    try:
        from tasks.scenarios.warmup import reset_shapes
    except ImportError:
        return
    reset_shapes(run_dir, engine)


STEPS: dict[str, Callable[..., dict[str, Any]]] = {
    "plan": plan, "pin": pin, "deploy": deploy, "wait_ready": wait_ready,
    "startup_findings": startup_findings, "functional": functional, "warmup": warmup, "long_context": long_context,
    "boundary": boundary, "prefix_cache": prefix_cache, "teardown": teardown, "validate": validate,
}


def register(sub: Any) -> None:
    p = sub.add_parser("step", help="run one pipeline step (as a DAG task does)")
    p.add_argument("name", choices=sorted([*STEPS, *PERF_SCENARIOS, "archive", "report"]))
    p.add_argument("--config", required=True, help="run config, YAML or JSON file")
    p.add_argument("--run-id", required=True)
    p.add_argument("--engine")
    p.set_defaults(run=_run_cli)


RUN_LEVEL_STEPS = ("plan", "pin", "validate", "archive", "report")


def _engine_option_error(name: str, engine: str | None, cfg: RunConfig) -> str | None:
    """What is wrong with --engine for step `name`, in the user's words; None when it fits."""
    engines = ", ".join(e.name for e in cfg.engines)
    if name in RUN_LEVEL_STEPS and engine is not None:
        return f"{name} is a run-level step and takes no --engine: drop --engine {engine}"
    if name not in RUN_LEVEL_STEPS and engine is None:
        return f"{name} is a per-engine step: give --engine NAME (the config's engines: {engines})"
    if engine is not None and engine not in {e.name for e in cfg.engines}:
        return f"--engine {engine} is not an engine of the config (its engines: {engines})"
    return None


def _run_cli(args: Any) -> int:
    config = read_config_file(args.config)
    cfg = load_config(config, args.run_id)  # bad config or run id: exit 2 before any file is written
    problem = _engine_option_error(args.name, args.engine, cfg)
    if problem:
        print(f"dayone step {args.name}: {problem}", file=sys.stderr)
        return 2
    if args.name in PERF_SCENARIOS:
        result = perf(config, args.run_id, args.engine, args.name)
    elif args.name in ("archive", "report"):
        from tasks.archive import client_from_env

        result = {"archive": archive, "report": report}[args.name](config, args.run_id, client_from_env())
    else:
        fn = STEPS[args.name]
        extra = {"sync_kubernetes": True} if args.name == "wait_ready" else {}  # a pod has no sensor: poll
        result = fn(config, args.run_id, args.engine, **extra) if args.engine else fn(config, args.run_id)
    print(json.dumps(result, indent=2, default=str))
    return 0

