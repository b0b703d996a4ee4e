"""The evaluation's task graph, shared by dayone_eval (a person's run) and dayone_nightly.

plan -> pin -> engine positions (lanes by node, lanes.py) -> [compare] -> validate -> archive (an
Asset) -> report -> conclude. The DAG files only call `evaluation()`; each task calls one step of
tasks/ through glue.run_step, or through `run_recorded` for the steps that need Airflow's context
(the logical date, the S3 connection).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

import pendulum
from airflow.sdk import task, task_group

from dayone_airflow.assets import ARCHIVED_RUN, archive_event_extra
from dayone_airflow.glue import (RUN_LEVEL_STEPS, config_from_params, conclude, dayone_run_id, recorded,
                                 run_step)
from dayone_airflow.lanes import MAX_ENGINES_PER_NODE, positions

log = logging.getLogger("dayone.airflow")

ARCHIVE_RETRIES = {"retries": 3, "retry_delay": pendulum.duration(seconds=10)}
SCENARIO_STEPS = ("startup_findings", "functional", "warmup", "short", "prefill", "decode", "rate",
                  "long_context", "boundary", "prefix_cache")
NIGHTLY_SCHEDULE_VARIABLE = "dayone_nightly_schedule"
NIGHTLY_SCHEDULE_DEFAULT = "@daily"


def run_recorded(step: str, fn: Callable[[dict[str, Any], str], dict[str, Any]], params: dict[str, Any],
                 airflow_run_id: str) -> dict[str, Any]:
    """Run a run-level step that needs Airflow's context, recording its outcome as glue.run_step does."""
    run_id = dayone_run_id(airflow_run_id)
    return recorded(step, None, run_id, lambda: fn(config_from_params(params), run_id))


# ---- run-level steps -----------------------------------------------------------------------------


def _plan(config: dict[str, Any], run_id: str) -> dict[str, Any]:
    from tasks import steps
    from tasks.config import parse_run_config

    from dayone_airflow.connections import require_archive_connection

    placed = positions(parse_run_config({**config, "run_id": run_id}))  # bad placement fails before the manifest
    require_archive_connection(config)  # no archive: fail now, not after the measurements
    planned = steps.plan(config, run_id)
    return {"positions": placed, "steps": planned["steps"]}


def _pin_dated(logical_date: dt.datetime | None, backfill: bool) -> Callable[[dict[str, Any], str], dict[str, Any]]:
    def pin(config: dict[str, Any], run_id: str) -> dict[str, Any]:
        from tasks import steps
        from tasks.catalog import pin_for_date

        if logical_date is None:  # a manual run without a logical date has no catalog entry to read or write
            return {"source": "pinned now", "digests": steps.pin(config, run_id)}
        from dayone_airflow.connections import s3_client

        return pin_for_date(config, run_id, logical_date, s3_client(config), backfill)

    return pin


def _compare(config: dict[str, Any], run_id: str) -> dict[str, Any]:
    from dayone_airflow.connections import s3_client
    from tasks.compare import compare_run
    from tasks.steps import _planned, load_config

    run_dir = _planned(run_id)
    return compare_run(run_dir, load_config(config, run_id), s3_client(config))


# ---- the graph -----------------------------------------------------------------------------------


def _engine_group(position: int, handles: dict[str, Any]) -> Any:
    @task_group(group_id=f"engines_{position}")
    def engine(name):
        @task
        def deploy(name, params=None, run_id=None):
            run_step("deploy", params, run_id, name)
            return name

        def step(step_name):
            @task(task_id=step_name, trigger_rule="all_done")
            def _step(name, params=None, run_id=None):
                return run_step(step_name, params, run_id, name)

            return _step(name)

        @task
        def teardown(name, params=None, run_id=None):
            return run_step("teardown", params, run_id, name)

        from dayone_airflow.kubernetes import EngineReadySensor

        deployed = deploy(name)
        ready = EngineReadySensor(task_id="wait_ready", engine=deployed)  # deferrable on Kubernetes
        scenario_steps = [step(s) for s in SCENARIO_STEPS]
        ready >> scenario_steps[0]
        for before, after in zip(scenario_steps, scenario_steps[1:]):
            before >> after
        torn_down = teardown(deployed).as_teardown(setups=deployed)
        scenario_steps[-1] >> torn_down
        handles.update(last=scenario_steps[-1].operator, teardown=torn_down.operator)

    return engine


def evaluation(nightly: bool = False) -> None:
    """Add the evaluation's tasks to the DAG being defined. `nightly` adds the catalog and compare."""

    @task(task_id="plan")
    def plan(params=None, run_id=None):
        return run_recorded("plan", _plan, params, run_id)

    @task(task_id="pin_images")
    def pin_images(params=None, run_id=None):
        return run_step("pin", params, run_id)

    @task(task_id="pin_images")
    def pin_dated(params=None, run_id=None, logical_date=None, dag_run=None):
        backfill = str(getattr(dag_run, "run_type", "")).lower().endswith("backfill")
        return run_recorded("pin", _pin_dated(logical_date, backfill), params, run_id)

    @task(task_id="compare", trigger_rule="all_done")
    def compare(params=None, run_id=None):
        return run_recorded("compare", _compare, params, run_id)

    @task(trigger_rule="all_done")
    def validate(params=None, run_id=None):
        return run_step("validate", params, run_id)

    @task(trigger_rule="all_done", outlets=[ARCHIVED_RUN], **ARCHIVE_RETRIES)
    def archive(params=None, run_id=None, outlet_events=None):
        result = run_step("archive", params, run_id)
        outlet_events[ARCHIVED_RUN].extra = archive_event_extra(dayone_run_id(run_id), result)
        return result

    @task(**ARCHIVE_RETRIES)
    def report(params=None, run_id=None):
        return run_step("report", params, run_id)

    # all_done: a config the plan rejects skips everything after it; the verdict must still fail the run
    @task(task_id="conclude", trigger_rule="all_done")
    def conclude_run(params=None, run_id=None):
        return conclude(params, run_id, RUN_LEVEL_STEPS + (("compare",) if nightly else ()))

    def engines_due(position: int):
        # Position p starts after the pin and after every teardown of position p-1 (skipped when that
        # engine never deployed); a failed teardown stops it, since the old engine may still hold the node.
        @task(task_id=f"engines_{position}_due", trigger_rule="none_failed_min_one_success")
        def due(planned):
            return planned["positions"][position]

        return due

    planned = plan()
    pinned = pin_dated() if nightly else pin_images()
    planned >> pinned
    engine_ends: list[Any] = []
    previous_teardown = None
    for p in range(MAX_ENGINES_PER_NODE):
        names = engines_due(p)(planned)
        pinned >> names.operator
        if previous_teardown is not None:
            previous_teardown >> names.operator
        handles: dict[str, Any] = {}
        _engine_group(p, handles).expand(name=names)
        previous_teardown = handles["teardown"]
        engine_ends += [handles["last"], handles["teardown"]]
    validated = validate()
    if nightly:  # the regressions table is validated and archived with the run's other tables
        engine_ends >> compare() >> validated
    else:
        engine_ends >> validated
    validated >> archive() >> report() >> conclude_run()


def nightly_schedule() -> str:
    """The nightly's schedule: the Airflow Variable `dayone_nightly_schedule` (cron or preset), else daily."""
    from airflow.sdk import Variable

    try:
        return Variable.get(NIGHTLY_SCHEDULE_VARIABLE, default=NIGHTLY_SCHEDULE_DEFAULT) or NIGHTLY_SCHEDULE_DEFAULT
    except Exception as exc:  # noqa: BLE001  (no metadata DB or API at parse time: keep the default)
        log.warning("Variable %s unreadable (%s); nightly schedule %s", NIGHTLY_SCHEDULE_VARIABLE, exc,
                    NIGHTLY_SCHEDULE_DEFAULT)
        return NIGHTLY_SCHEDULE_DEFAULT
