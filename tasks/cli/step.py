"""`dayone step NAME`: one step run as a DAG task runs it (tasks/steps/execution.py), for a runner pod
or a person; its outcome is recorded the same way. Without --config the run's own config is read from
its manifest in the run's storage (DAYONE_STAGING), as a runner pod does."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from tasks.cli.live import watched
from tasks.config import RunConfig, read_config_file
from tasks.load import pod_shards
from tasks.load.pod_shards import PodShards, parse_shard, pod_group, serve_peer
from tasks.steps.context import NOT_ATTEMPTED_EXIT, NotAttempted, RunContext, load_config
from tasks.core.names import PERF_SCENARIOS
from tasks.steps.execution import execute, execute_group
from tasks.steps.registry import STEPS


def register(sub: Any) -> None:
    p = sub.add_parser("step", help="run one pipeline step (as a DAG task does) and record its outcome")
    p.add_argument("name", choices=list(STEPS))
    p.add_argument("--config", help="run config, YAML or JSON file; default: the planned run's own (its manifest)")
    p.add_argument("--run-id", required=True)
    p.add_argument("--engine", action="append",
                   help="the engine (repeat it for a performance scenario measuring several together)")
    p.add_argument("--shard", metavar="K/N",
                   help="runner pod K of N measuring the step's rounds together (tasks/load/pod_shards.py): "
                        "0 runs the step and leads, the others lend it their cores")
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


def _planned_config(run_id: str) -> dict[str, Any]:
    """The config the run's plan step recorded in its manifest (engine env values withheld: a step
    after the plan deploys nothing)."""
    from tasks.state.documents import manifest
    from tasks.state.storage import RunDir
    from tasks.state.object_store import staging_from_env

    doc = manifest(RunDir(run_id, staging_from_env()))
    if doc is None:
        raise NotAttempted(f"run {run_id} was never planned (no manifest in its storage); give --config")
    return doc["config"]


def _log_path(ctx: RunContext, name: str, engines: list[str]) -> Path:
    """Where a step run on a terminal logs: beside the engines' logs on this machine."""
    return ctx.run_dir.node_dir("logs") / ("-".join(["step", name, *engines]) + ".log")


def _run_cli(args: Any) -> int:
    from tasks.publish.archive import client_from_env

    try:
        text = read_config_file(args.config) if args.config else _planned_config(args.run_id)
    except NotAttempted as exc:
        print(f"dayone step {args.name}: not attempted: {exc}", file=sys.stderr)
        return NOT_ATTEMPTED_EXIT
    config = load_config(text, args.run_id)  # bad config: exit 2, nothing written
    engines = args.engine or []
    if len(engines) > 1 and args.name not in PERF_SCENARIOS:
        print(f"dayone step {args.name}: one --engine only; performance scenarios alone measure engines together",
              file=sys.stderr)
        return 2
    for engine in engines or [None]:
        problem = _engine_option_error(args.name, engine, config)
        if problem:
            print(f"dayone step {args.name}: {problem}", file=sys.stderr)
            return 2
    ctx = RunContext.build(config, args.run_id, archive_client=client_from_env)
    shard, pods = parse_shard(args.shard) if args.shard else (0, 1)
    group = pod_group(args.name, engines)
    join_s = config.kubernetes.runner.startup_timeout_s
    if shard > 0:  # a peer: it measures what shard 0 hands it and records nothing of its own
        return serve_peer(ctx.run_dir, group, shard, join_s)
    leading = contextlib.nullcontext() if pods == 1 else pod_shards.leading(PodShards(
        ctx.run_dir, group, pods, config.kubernetes.runner.cpu, config.load.streams_per_process, join_s))
    try:
        with leading, watched(ctx.run_dir, lambda: _log_path(ctx, args.name, engines),
                              f"dayone step {args.name}"):
            if len(engines) > 1:
                result = execute_group(ctx, args.name, engines)
            else:
                result = execute(ctx, args.name, engines[0] if engines else None)
    except NotAttempted as exc:
        print(f"dayone step {args.name}: not attempted: {exc}", file=sys.stderr)
        return NOT_ATTEMPTED_EXIT
    print(json.dumps(result.model_dump(mode="json"), indent=2, default=str))
    return 0
