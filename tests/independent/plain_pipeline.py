"""dayone_eval through Airflow (`dag.test()` on SQLite, real SeaweedFS) against the plain servers of
these tests: the run, and the config pieces every such test writes the same way."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cpu_wait import ATTEMPTS, LOADED, pressure_share

REPO = Path(__file__).resolve().parents[2]
MEASURED = ("short", "prefill", "decode", "rate", "long_context", "boundary", "prefix_cache")


def scenarios(**given: Any) -> dict[str, Any]:
    """The functional checks and every measured scenario off, but those given."""
    return {"functional": {"enabled": False}, **{name: {"enabled": False} for name in MEASURED}, **given}


def external(name: str, url: str, dialect: str = "openai") -> dict[str, Any]:
    """An engine already serving at `url` (a plain server of the test)."""
    return {"name": name, "dialect": dialect, "launcher": "external", "endpoint": url}


def run_pipeline(conf: dict[str, Any], s3_server: Any, root: Path, when: datetime) -> Any:
    """Run dayone_eval on `conf` with its run state under `root`; the run's RunDir."""
    from airflow.dag_processing.dagbag import DagBag

    from dayone_airflow.glue import dayone_run_id
    from tasks.state.storage import RunDir

    dag = DagBag(dag_folder=str(REPO / "dags")).get_dag("dayone_eval")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAYONE_WORKDIR", str(root))
        mp.setenv("AIRFLOW_CONN_DAYONE_S3", s3_server.connection_uri())
        run = dag.test(run_conf=conf, logical_date=when, run_after=when)
    return RunDir(dayone_run_id(run.run_id), root)


def run_pipeline_decided(conf: dict[str, Any], s3_server: Any, root: Path, when: datetime,
                         decided: Callable[[Any], bool]) -> Any:
    """run_pipeline, again (a minute later, under root/tryN) while `decided(run_dir)` is false and the machine
    was loaded (cpu_wait.LOADED), up to cpu_wait.ATTEMPTS runs; the last run's RunDir. A stall of a second
    in a paired round of a fraction of one can widen a handful of rounds' interval past 1 on a loaded machine;
    an engine that is not what the test says misses in every run."""
    for attempt in range(ATTEMPTS):
        pressure = pressure_share()
        run_dir = run_pipeline(conf, s3_server, root / f"try{attempt}", when + timedelta(minutes=attempt))
        loaded = pressure()
        ok = decided(run_dir)
        print(f"run {attempt + 1}: some task waited for a core {100 * loaded:.0f}% of the time; decided: {ok}")
        if ok or loaded < LOADED:
            return run_dir
    return run_dir
