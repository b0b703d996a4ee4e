"""dayone_eval through Airflow (`dag.test()` on SQLite, real SeaweedFS) against the plain servers of
these tests: the run, and the config pieces every such test writes the same way."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

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
