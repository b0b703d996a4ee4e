"""What unpausing dayone_nightly does: nothing on its own until the Airflow Variable
`dayone_nightly_schedule` gives it a schedule (the Trigger dialog unpauses the DAG it triggers, and a
scheduled run would use the run config's defaults, which nobody chose).

The scheduler asks the serialized DAG's `next_dagrun_info` for the first automated run when the DAG
appears or is unpaused; the tests ask it the same question.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VARIABLE = "AIRFLOW_VAR_DAYONE_NIGHTLY_SCHEDULE"


def _first_automated_run(airflow_db):
    """Parse the DAGs afresh (the schedule is read at parse) and ask the scheduler's question."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    nightly = DagSerialization.from_dict(DagSerialization.to_dict(bag.get_dag("dayone_nightly")))
    return nightly, nightly.next_dagrun_info(last_automated_run_info=None)


def test_unconfigured_nightly_has_no_schedule_so_unpausing_creates_no_run(airflow_db, monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    from dayone_airflow.pipeline import nightly_schedule

    assert nightly_schedule() is None
    nightly, first = _first_automated_run(airflow_db)
    assert not nightly.timetable.periodic
    assert first is None


@pytest.mark.parametrize("schedule", ["0 3 * * *", "@daily"])
def test_the_variable_schedules_the_nightly(airflow_db, monkeypatch, schedule):
    monkeypatch.setenv(VARIABLE, schedule)
    from dayone_airflow.pipeline import nightly_schedule

    assert nightly_schedule() == schedule
    nightly, first = _first_automated_run(airflow_db)
    assert nightly.timetable.periodic  # and so backfills are possible
    assert first is not None


CONFIG_VARIABLE = "AIRFLOW_VAR_DAYONE_NIGHTLY_CONFIG"


def _nightly_dag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    return bag, bag.get_dag("dayone_nightly")


def test_the_config_variable_chooses_what_a_scheduled_run_measures(airflow_db, monkeypatch):
    from dayone_airflow.glue import config_from_params

    from tasks.config import parse_run_config

    monkeypatch.setenv(CONFIG_VARIABLE, "preset: local-sim\nmodel: {name: nightly-model}\n")
    bag, nightly = _nightly_dag(airflow_db)
    assert not bag.import_errors, bag.import_errors
    defaults = {name: param.value for name, param in nightly.params.items()}  # a scheduled run's params
    assert defaults["preset"] == "local-sim"
    config = parse_run_config(config_from_params(defaults))
    assert config.model.name == "nightly-model"  # the Variable's own field
    assert config.target == "local" and {e.launcher for e in config.engines} == {"sim"}  # the preset's
    # a person's run keeps the form's defaults
    assert bag.get_dag("dayone_eval").params["preset"] == "custom"


def test_a_config_variable_that_is_not_a_run_config_fails_the_import_naming_the_field(airflow_db, monkeypatch):
    monkeypatch.setenv(CONFIG_VARIABLE, '{"engines": [{"name": "a", "dialect": "nope"}]}')
    bag, _ = _nightly_dag(airflow_db)
    errors = " ".join(str(e) for e in bag.import_errors.values())
    assert "dayone_nightly_config" in errors and "engines[0].dialect" in errors, errors
