"""dayone_nightly: the scheduled regression run, and the DAG that backfills older digests.

Schedule: the Airflow Variable `dayone_nightly_schedule` (cron or preset), read at parse; none while it
is unset, so unpausing the DAG (the Trigger dialog does) starts no run by itself: a scheduled run has no
conf and evaluates the params' defaults: the Variable `dayone_nightly_config` (a run config, YAML or JSON,
may name a preset) sets them, else they are the protocol preset's. Backfills need the schedule too.
pin images for the logical date (the digest catalog's entry for that date if it has one, else the
current digests, then recorded) -> the same evaluation as dayone_eval -> compare with the last good
run (a regression fails `compare`) -> validate -> archive -> report -> conclude.
Backfill: `airflow backfill create --dag-id dayone_nightly --from-date ... --to-date ...` (docs/backfill.md).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag
from dayone_airflow.params import eval_params
from dayone_airflow.pipeline import evaluation, nightly_config, nightly_schedule


@dag(
    dag_id="dayone_nightly",
    schedule=nightly_schedule(),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params=eval_params(nightly_config()),
    tags=["dayone", "nightly"],
    doc_md=__doc__,
)
def dayone_nightly():
    evaluation(nightly=True)


dayone_nightly()
