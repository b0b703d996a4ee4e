"""The DAG with DAYONE_STAGING set: every task builds its run context with run state under the S3
staging prefix, reached through the `dayone_s3` connection; the worker's own disk keeps only the
local engine's log. The report link reads a run's report from there when the archive has none."""

from __future__ import annotations

import pytest
from storage_helpers import files_under

from tasks.state.storage import RunDir

RUN = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
    "engines": [{"name": "sim-a", "dialect": "sglang", "launcher": "sim"}],
    "scenarios": {
        "short": {"concurrency": [1, 4], "rounds": 1, "requests_per_round": 8},
        "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
        "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
    },
    "archive": {"bucket": "dayone-airflow-staging"},
    "request_timeout_s": 30,
}


@pytest.fixture()
def staged(staging, monkeypatch):
    monkeypatch.setenv("DAYONE_STAGING", f"s3://{staging.bucket}/{staging.prefix}")
    return staging


def test_the_dag_keeps_run_state_in_s3_and_the_worker_disk_only_the_engine_log(eval_dag, s3_conn, staged,
                                                                                 run_root):
    from dayone_airflow.glue import dayone_run_id, run_dir
    from dayone_airflow.links import staged_object

    run = eval_dag.test(run_conf=RUN)
    assert str(run.state).endswith("success"), run.state
    run_id = dayone_run_id(run.run_id)
    assert files_under(run_root) == [f"{run_id}/logs/sim-a.log"]
    state = RunDir(run_id, staged)
    assert run_dir(run.run_id).where() == state.where()
    assert state.read_json("archive.json")["prefixes"]["sim-a"].endswith(run_id + "/")
    assert state.read_json("state/steps/report.json")["status"] == "ok"
    assert len([r for r in state.read_rows("requests", "sim-a") if r["scenario"] == "short"]) == 16
    assert staged_object(run_id, "report.html") == state.read_bytes("report.html") != None  # noqa: E711


def test_staging_without_its_connection_names_the_fix(staged, monkeypatch):
    from dayone_airflow.connections import ArchiveConnectionMissing, staging_store

    monkeypatch.delenv("AIRFLOW_CONN_DAYONE_S3", raising=False)
    with pytest.raises(ArchiveConnectionMissing, match="DAYONE_STAGING .* 'dayone_s3' .* not defined"):
        staging_store()


def test_staging_store_comes_from_the_connection(staged, s3_conn):
    from dayone_airflow.connections import staging_store

    store = staging_store()
    assert (store.bucket, store.prefix) == (staged.bucket, staged.prefix)
    assert store.access.endpoint_url == s3_conn.endpoint_url and store.access.access_key == s3_conn.access_key


def test_without_staging_run_state_stays_on_the_worker(monkeypatch, run_root):
    from dayone_airflow.connections import staging_store
    from dayone_airflow.glue import run_dir

    monkeypatch.delenv("DAYONE_STAGING", raising=False)
    assert staging_store() is None
    assert run_dir("manual__x").path == run_root / "manual__x"
