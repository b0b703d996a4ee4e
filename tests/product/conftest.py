"""Fixtures of the product tests (the shared ones, airflow_db, s3_conn, run_root, are in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def dagbag(airflow_db):
    """DayOne's DAGs, parsed afresh for each test: `dag.test()` runs tasks in this process and leaves the
    run's conf in the DAG object's params, so a DAG object must not be shared between tests."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag
