"""dayone_eval: evaluate one model on one or more serving engines, end to end.

plan -> pin images -> per engine [deploy -> wait ready -> startup findings -> functional checks ->
short, prefill, decode, rate -> long context, boundary -> prefix cache -> teardown (always)]
-> validate -> archive (Asset dayone_archived_run) -> report -> conclude. Engines on one node run one
after another (task groups engines_0, engines_1, ...); engines on separate nodes run side by side.
Wiring only: the graph is plugins/dayone_airflow/pipeline.py, every step lives in tasks/.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag
from dayone_airflow.params import eval_params
from dayone_airflow.pipeline import evaluation


@dag(
    dag_id="dayone_eval",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params=eval_params(),
    tags=["dayone"],
    doc_md=__doc__,
)
def dayone_eval():
    evaluation(nightly=False)


dayone_eval()
