"""dayone_eval: evaluate one model on one or more serving engines, end to end.

pin images -> per engine [deploy -> wait ready -> startup findings -> functional checks ->
short, prefill, decode, rate -> long context, boundary -> prefix cache -> teardown (always)]
-> validate -> archive -> report -> conclude. Wiring only: every step lives in tasks/steps.py.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task, task_group
from dayone_airflow.glue import conclude, run_step
from dayone_airflow.params import eval_params

ARCHIVE_RETRIES = {"retries": 3, "retry_delay": pendulum.duration(seconds=10)}


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
    @task
    def plan(params=None, run_id=None):
        return run_step("plan", params, run_id)["engines"]

    @task
    def pin_images(engines, params=None, run_id=None):
        run_step("pin", params, run_id)
        return engines

    @task_group
    def engine(name):
        @task
        def deploy(name, params=None, run_id=None):
            run_step("deploy", params, run_id, name)
            return name

        @task
        def wait_ready(name, params=None, run_id=None):
            return run_step("wait_ready", params, run_id, name)

        def step(step_name):
            @task(task_id=step_name, trigger_rule="all_done")
            def _step(name, params=None, run_id=None):
                return run_step(step_name, params, run_id, name)

            return _step(name)

        @task
        def teardown(name, params=None, run_id=None):
            return run_step("teardown", params, run_id, name)

        deployed = deploy(name)
        ready = wait_ready(deployed)
        scenario_steps = [step(s) for s in ("startup_findings", "functional", "short", "prefill", "decode", "rate",
                                             "long_context", "boundary", "prefix_cache")]
        ready >> scenario_steps[0]
        for before, after in zip(scenario_steps, scenario_steps[1:]):
            before >> after
        scenario_steps[-1] >> teardown(deployed).as_teardown(setups=deployed)

    @task(trigger_rule="all_done")
    def validate(params=None, run_id=None):
        return run_step("validate", params, run_id)

    @task(trigger_rule="all_done", **ARCHIVE_RETRIES)
    def archive(params=None, run_id=None):
        return run_step("archive", params, run_id)

    @task(**ARCHIVE_RETRIES)
    def report(params=None, run_id=None):
        return run_step("report", params, run_id)

    @task(task_id="conclude")
    def conclude_run(params=None, run_id=None):
        return conclude(params, run_id)

    lanes = engine.expand(name=pin_images(plan()))
    lanes >> validate() >> archive() >> report() >> conclude_run()


dayone_eval()
