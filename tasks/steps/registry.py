"""The step registry: every step of a run, in the one order the DAG's graph follows (stated in
docs/ARCHITECTURE.md, "The step order"), and the plan step, which records the run's matrix from it."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from tasks.config import RunConfig
from tasks.steps.context import RunContext
from tasks.core.names import EVIDENCE_SCENARIOS, PERF_SCENARIOS
from tasks.state.documents import EVAL_SET, MANIFEST
from tasks.steps import engine_steps, run_steps, traffic_steps
from tasks.steps.protocol import Step


def plan(ctx: RunContext, _: None = None) -> dict[str, Any]:
    """Check what the run needs and record its plan in the manifest. Fails before any deploy: a
    placement the DAG cannot run, or an archive that cannot be reached (nothing measured could be kept)."""
    from tasks.steps.lanes import design, positions, turns

    cfg = ctx.config
    placed = positions(cfg)
    engine_turns = turns(cfg)
    if ctx.archive_client is not None:
        ctx.s3()  # the DAG's client names the missing connection and its fix
    _keep_eval_set(ctx)
    if cfg.scenarios.openwebui.enabled and cfg.target != "kubernetes":  # on Kubernetes it runs from its image
        from tasks.openwebui.server import venv_path

        venv_path(cfg.scenarios.openwebui.venv)  # names scenarios.openwebui.venv and `make openwebui-venv`
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
        "turns": engine_turns,
        "experiment": _experiment_record(cfg),
        "config": _without_env_values(cfg.model_dump(mode="json")),
    }
    if cfg.scenarios.trace.enabled:  # the trace read whole once, each bad row named, before any deploy
        from tasks.traffic.trace_source import check_trace

        doc["trace"] = check_trace(cfg, ctx.s3 if ctx.archive_client is not None else None)
    if cfg.scenarios.dataset.enabled:  # the dataset read whole once, each bad row named, before any deploy
        from tasks.traffic.dataset_rows import check_dataset

        doc["dataset"] = check_dataset(cfg, ctx.s3 if ctx.archive_client is not None else None)
    ctx.run_dir.write_json(MANIFEST, doc)
    return {"run_id": ctx.run_id, "engines": [e.name for e in cfg.engines], "steps": len(matrix), "positions": placed,
            "turns": engine_turns}


def _keep_eval_set(ctx: RunContext) -> None:
    """Read and check the user's eval set before anything deploys (every bad line named), and keep its
    items in the run state, so every engine's quality step scores the same ones."""
    source = ctx.config.scenarios.quality.eval_set
    if not ctx.config.scenarios.quality.enabled or not source:
        return
    from tasks.quality.eval_set import items_as_json, parse_eval_set, read_eval_set

    s3 = ctx.s3() if source.startswith("s3://") and ctx.archive_client is not None else None
    ctx.run_dir.write_json(EVAL_SET, items_as_json(parse_eval_set(read_eval_set(source, s3), source)))


def _experiment_record(cfg: RunConfig) -> dict[str, Any] | None:
    """The experiment as run: each variant's settings that differ from the base (secret env values withheld)."""
    if cfg.experiment is None:
        return None
    from tasks.config.variants import differences

    exp = cfg.experiment
    base = cfg.engine(exp.base)

    def shown(path: str, value: Any) -> Any:
        from tasks.core.desensitize import REDACTED, secret_name

        return REDACTED if path.startswith("env.") and value is not None and secret_name(path[4:]) else value

    variants = {e.name: {p: shown(p, b) for p, (_, b) in differences(base, e).items()}
                for e in cfg.engines if e.name != exp.base}
    base_values = {p: shown(p, a) for e in cfg.engines if e.name != exp.base
                   for p, (a, _) in differences(base, e).items()}
    return {**exp.model_dump(mode="json"), "base_values": base_values, "variants": variants}


def _without_env_values(config: dict[str, Any]) -> dict[str, Any]:
    """The config for the manifest: engine environment values kept so the start can be repeated, those
    of secret-named variables withheld (tasks/core/desensitize.py `secret_name`)."""
    from tasks.core.desensitize import recorded_env

    for engine in config.get("engines", []):
        engine["env"] = recorded_env(engine.get("env") or {})
    return config


def _section_enabled(name: str) -> Callable[[RunConfig], bool]:
    return lambda cfg: bool(getattr(cfg.scenarios, name).enabled)


# ---- the registry --------------------------------------------------------------------------------

# One list, in the order of the DAG's graph: the run-level steps before the engines, each engine
# position's steps, the run-level steps after them (docs/ARCHITECTURE.md, "The step order").
_ORDER = [
    # engines that killed runs left on the cluster hold GPUs: removed before this run's deploys
    Step("cleanup", False, run_steps.cleanup, enabled=lambda cfg: cfg.target == "kubernetes" and not cfg.dry_run,
         retries=2, nightly_only=True),
    # a retry for a try lost before it began (its worker died, or the Airflow API never answered its start);
    # a rejected config fails at once (plugins/dayone_airflow/glue.py)
    Step("plan", False, plan, retries=1, required=True),
    Step("pin", False, run_steps.pin, retries=2, required=True),  # a registry hiccup; pinning writes whole documents
    Step("deploy", True, engine_steps.deploy, retries=1),  # a retry first removes what the failed try made
    Step("wait_ready", True, engine_steps.wait_ready),
    Step("startup_findings", True, engine_steps.startup_findings, scenario=True),
    Step("functional", True, engine_steps.functional, enabled=_section_enabled("functional"), scenario=True),
    Step("openwebui", True, engine_steps.openwebui, enabled=_section_enabled("openwebui"), scenario=True),
    Step("quality", True, engine_steps.quality, enabled=_section_enabled("quality"), scenario=True),
    Step("warmup", True, engine_steps.warmup, enabled=lambda cfg: cfg.scenarios.warmup, scenario=True),
    # A measurement is retried only when its worker died mid-try (see retry_after_failure).
    *[Step(s, True, engine_steps.perf_step(s), enabled=_section_enabled(s), scenario=True, retries=2,
           retry_after_failure=False) for s in PERF_SCENARIOS],
    Step("capacity", True, engine_steps.capacity, enabled=_section_enabled("capacity"), scenario=True),
    Step("trace", True, engine_steps.trace, enabled=_section_enabled("trace"), scenario=True),
    Step("long_context", True, engine_steps.long_context, enabled=_section_enabled("long_context"), scenario=True),
    Step("boundary", True, engine_steps.boundary, enabled=_section_enabled("boundary"), scenario=True),
    Step("prefix_cache", True, engine_steps.prefix_cache, enabled=_section_enabled("prefix_cache"), scenario=True),
    Step("sessions", True, traffic_steps.sessions, enabled=_section_enabled("sessions"), scenario=True),
    Step("shared_prefix", True, traffic_steps.shared_prefix, enabled=_section_enabled("shared_prefix"),
         scenario=True),
    Step("dataset", True, traffic_steps.dataset, enabled=_section_enabled("dataset"), scenario=True),
    Step("teardown", True, engine_steps.teardown, retries=2),  # idempotent
    Step("compare", False, run_steps.compare, retries=2, required=True, nightly_only=True),
    Step("validate", False, run_steps.validate, retries=1, required=True),
    Step("archive", False, run_steps.archive, retries=3, required=True),  # write-once objects: a retry skips what landed
    Step("report", False, run_steps.report, retries=3, required=True),
]
STEPS: dict[str, Step] = {s.name: s for s in _ORDER}
ENGINE_STEPS = tuple(s.name for s in _ORDER if s.per_engine)
_FIRST, _LAST = _ORDER.index(STEPS[ENGINE_STEPS[0]]), _ORDER.index(STEPS[ENGINE_STEPS[-1]])
# The run-level steps before and after every engine position, in the order the DAG chains them.
BEFORE_ENGINES = tuple(s.name for s in _ORDER[:_FIRST])
AFTER_ENGINES = tuple(s.name for s in _ORDER[_LAST + 1:])
# The engine steps between readiness and teardown, in the order the DAG chains them.
SCENARIO_STEPS = tuple(s.name for s in _ORDER if s.scenario)
assert len(ENGINE_STEPS) == _LAST - _FIRST + 1, "an engine position's steps must be consecutive"
assert set(EVIDENCE_SCENARIOS) <= set(SCENARIO_STEPS)


def required_run_steps(nightly: bool = False) -> tuple[str, ...]:
    """Run-level steps every run must complete for its verdict (execution.py `verdict`); the nightly adds its own."""
    return tuple(s.name for s in _ORDER if s.required and (nightly or not s.nightly_only))
