"""
### dayone_nightly: the scheduled regression run, and backfills of older digests

**No schedule until you set one.** The schedule is the Airflow Variable `dayone_nightly_schedule`
(cron or preset), read at parse: while it is unset, unpausing the DAG creates no run by itself.

**What it measures.** A scheduled run has no conf: it evaluates the Variable `dayone_nightly_config`
(a run config in YAML or JSON, may name a preset), else the custom preset (RunConfig's defaults).

**What it does.** The steps of `dayone_eval` and the nightly's own (docs/ARCHITECTURE.md, "The step
order"): it pins the images for the logical date (the digest catalog's entry if it has one, else
today's digests, then records them) and compares with the last good run: a regression fails
`compare`, so Airflow's alerting applies.

**Backfill.** `airflow backfill create --dag-id dayone_nightly --from-date ... --to-date ...`
(docs/backfill.md).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag
from dayone_airflow.params import eval_params
from dayone_airflow.pipeline import evaluation, nightly_config, nightly_schedule


@dag(
    dag_id="dayone_nightly",
    description="Nightly regression against the last good run; no schedule until the Variable "
                "dayone_nightly_schedule is set",
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
