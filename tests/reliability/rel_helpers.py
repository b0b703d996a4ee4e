"""Helpers of the reliability suite (fixtures live in conftest.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

# Planted credentials: distinctive strings that must never show up in anything DayOne produces.
PLANTED_ACCESS_KEY = "AKIAPLANTEDDAYONE042"
PLANTED_SECRET_KEY = "planted-s3-secret-7c1f9e2d4b6a"
PLANTED_ENGINE_TOKEN = "hf_plantedEngineToken0123456789"
PLANTED_ENGINE_LICENSE = "planted-license-5d8e3a1b9c"
PLANTED = (PLANTED_ACCESS_KEY, PLANTED_SECRET_KEY, PLANTED_ENGINE_TOKEN, PLANTED_ENGINE_LICENSE)


@dataclass
class EvalRun:
    run: Any  # the Airflow DagRun
    run_dir: Any  # tasks.state.storage.RunDir
    root: Path

    def outcome(self, name: str) -> dict[str, Any]:
        """The recorded outcome of step `name` (`ENGINE-STEP` for engine steps)."""
        return self.run_dir.read_json(f"state/steps/{name}.json") or {}

    def rows(self, table: str, engine: str | None = None) -> list[dict[str, Any]]:
        return self.run_dir.read_rows(table, engine)


def run_eval(dag: Any, conf: dict[str, Any], root: Path, env: dict[str, str],
             setup: Callable[[pytest.MonkeyPatch], None] | None = None, when: datetime | None = None) -> EvalRun:
    """dag.test() with DAYONE_WORKDIR=root and `env` set for the run only; `setup` may add patches.

    `when` fixes the run's logical date, so its run id (manual__<when>) is known beforehand.
    """
    from dayone_airflow.glue import dayone_run_id
    from tasks.state.storage import RunDir

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAYONE_WORKDIR", str(root))
        for k, v in env.items():
            mp.setenv(k, v)
        if setup is not None:
            setup(mp)
        run = dag.test(run_conf=conf) if when is None else dag.test(run_conf=conf, logical_date=when, run_after=when)
        run_dir = RunDir(dayone_run_id(run.run_id), root)
    return EvalRun(run, run_dir, root)


def s3_env(server: Any) -> dict[str, str]:
    return {"AIRFLOW_CONN_DAYONE_S3": server.connection_uri()}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours is dead
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True
