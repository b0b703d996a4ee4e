"""
### dayone_eval: evaluate one model on its serving engines, end to end

Trigger it for a one-off evaluation: the form's **Preset** picks a starting point (`local-sim` and
`local-llamacpp-ab` run in minutes on a laptop; `protocol` is the full method for GPU servers, whose
engine images you give). The fields show the preset named by the Variable `dayone_eval_preset`
(`make ui` sets local-sim), else `custom` (RunConfig's defaults).

**What runs**: each engine is deployed, checked, measured and torn down (always); then the run
validates its tables (Great Expectations), archives them to S3 and writes its report (the **DayOne
report** tab). The steps, in order: docs/ARCHITECTURE.md, "The step order".

**Where to read more**: docs/PROTOCOL.md (the method), docs/ARCHITECTURE.md (the graph and the step
registry). Wiring only: the graph is `plugins/dayone_airflow/pipeline.py`, every step lives in `tasks/`.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag
from dayone_airflow.params import eval_defaults, eval_params
from dayone_airflow.pipeline import evaluation


@dag(
    dag_id="dayone_eval",
    description="Evaluate a model on its serving engines: API checks, performance, long context, prefix cache; archived with a report",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params=eval_params(eval_defaults()),
    tags=["dayone"],
    doc_md=__doc__,
)
def dayone_eval():
    evaluation(nightly=False)


dayone_eval()
