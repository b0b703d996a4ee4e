"""Fixtures of the product tests: DayOne's DAGs from a DagBag (the shared ones are in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag
