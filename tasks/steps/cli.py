"""`dayone step NAME`: one step run as a DAG task runs it (tasks/steps/execution.py), for a runner pod
or a person; its outcome is recorded the same way."""

from __future__ import annotations

import json
import sys
from typing import Any

from tasks.config import RunConfig, read_config_file
from tasks.run import NotAttempted, RunContext, load_config
from tasks.steps.execution import execute
from tasks.steps.registry import STEPS

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
