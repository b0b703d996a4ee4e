"""The one bridge between Airflow tasks and DayOne's steps (tasks/steps/).

It builds the run context from Airflow's (the config from params, a run id that is a valid
object-store path segment, cluster, registry and archive access from Airflow connections, and the
run's storage: under DAYONE_STAGING in S3 through the `dayone_s3` connection, so any worker or pod
finds what earlier tasks left, else the worker's DAYONE_WORKDIR), runs the step through
`tasks.steps.execution.execute`, which records its outcome, and maps "not attempted" to a skipped task.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import Any

log = logging.getLogger("dayone.airflow")

CONFIG_KEYS_EXCLUDED = ("run_conf_note",)


def dayone_run_id(airflow_run_id: str) -> str:
    """`manual__2026-11-30T07:40:34.058616+00:00` -> `manual__2026-11-30T07-40-34.058616-00-00`.

    The result names a directory under the runs root, so it never starts with a dot (no `.`, `..` or
    hidden name) and is never empty: leading dots become dashes.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", airflow_run_id)[:128]
    return re.sub(r"^\.+", lambda dots: "-" * len(dots.group()), safe) or "-"


def config_from_params(params: dict[str, Any], trigger_conf: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run config of an Airflow run's params, which hold every field (Airflow fills what the trigger
    left out with the DAG's default). `trigger_conf`: the conf the run was triggered with. When it is not
    the trigger form's (no `fields_preset`: the REST API, a client), each field it gave is kept over the
    preset even at a default's value (tasks/config/presets/). The form's `experiment: {}` (its JSON editor shows a
    null section as {}) is no experiment."""
    from tasks.config import RunConfig
    from tasks.config.presets import PRESET_FIELD, SHOWN_FIELD, is_preset, with_preset

    config = {k: v for k, v in dict(params).items() if k not in CONFIG_KEYS_EXCLUDED}
    if trigger_conf and SHOWN_FIELD not in trigger_conf and is_preset(config.get(PRESET_FIELD)):
        given = {k: v for k, v in trigger_conf.items() if k not in CONFIG_KEYS_EXCLUDED}
        config = with_preset(config, RunConfig().model_dump(mode="json"), explicit=given)
    if config.get("experiment") == {}:
        config["experiment"] = None
    return config


def trigger_conf() -> dict[str, Any] | None:
    """The conf the running task's Airflow run was triggered with (None outside a task)."""
    from airflow.sdk import get_current_context

    try:
        dag_run = get_current_context().get("dag_run")
    except RuntimeError:  # "no context was found"
        return None
    return dict(getattr(dag_run, "conf", None) or {})


def run_dir(airflow_run_id: str) -> Any:
    """The run's state (tasks/state/storage.py RunDir) in its storage, as every task of the run sees it."""
    from tasks.state.storage import RunDir

    from dayone_airflow.connections import staging_store

    return RunDir(dayone_run_id(airflow_run_id), staging_store())


def run_context(params: dict[str, Any], airflow_run_id: str, logical_date: dt.datetime | None = None,
                backfill: bool = False, accepted_run_ids: tuple[str, ...] = ()) -> Any:
    """The step's RunContext, with Airflow connections for the cluster, the registry, the archive and
    the run's storage."""
    from tasks.steps.context import RunContext

    from dayone_airflow.connections import cluster_access, connection_password, s3_client, staging_store

    config = config_from_params(params, trigger_conf())
    ctx = RunContext.build(config, dayone_run_id(airflow_run_id), staging=staging_store(),
                           archive_client=lambda: s3_client(config), logical_date=logical_date, backfill=backfill,
                           connection_password=connection_password)
    if ctx.config.target == "kubernetes":  # the parsed config: a preset may have set the target
        ctx.cluster = cluster_access()
    ctx.accepted_run_ids = accepted_run_ids  # the nightly's compare: runs a person accepted as the new level
    return ctx


def run_step(step: str, params: dict[str, Any], airflow_run_id: str, engine: str | None = None,
             **context: Any) -> dict[str, Any]:
    """Run one step for an Airflow task; its StepResult becomes the task's XCom."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from tasks.config import ConfigError
    from tasks.steps.context import NotAttempted
    from tasks.steps.execution import execute_with

    try:
        result = execute_with(lambda: run_context(params, airflow_run_id, **context), run_dir(airflow_run_id),
                              step, engine)
    except NotAttempted as exc:
        raise AirflowSkipException(str(exc)) from None
    except ConfigError as exc:  # the same config is rejected on every try: no retry
        raise AirflowFailException(str(exc)) from exc
    return result.model_dump(mode="json")


def conclude(params: dict[str, Any], airflow_run_id: str, required: tuple[str, ...]) -> dict[str, Any]:
    """Fail the Airflow run (so its alerting applies) when the run's verdict lists problems."""
    from tasks.steps.execution import verdict

    state = run_dir(airflow_run_id)
    problems = verdict(state, required)
    for problem in problems:
        log.error("run %s: %s", state.run_id, problem)
    if problems:
        raise RuntimeError("DayOne run finished with failures: " + "; ".join(problems))
    return {"problems": 0}
