"""The evaluation's task graph, shared by dayone_eval (a person's run) and dayone_nightly.

The graph follows the step registry (tasks/steps/registry.py) alone: its order, its retries, which
steps the nightly alone runs; the order is stated in docs/ARCHITECTURE.md, "The step order". Each task
runs one step through glue.run_step, which records its outcome. The run's engines are one mapped task
group, `engines`, an instance per engine named by it, in the order of their turns (tasks/steps/lanes.py): each
waits for the engine before it on its node, and the first engine of a position measures the position's
engines together (turns.py). The measuring steps are StepPodOperator tasks (step_pods.py): runner pods
under kubernetes.measure_from: cluster, this worker otherwise.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from airflow.sdk import chain, task, task_group

from dayone_airflow.assets import ARCHIVED_RUN, archive_event_extra
from dayone_airflow.glue import conclude, dayone_run_id, run_step
from tasks.steps.runner_pods import RUNNER_STEPS
from tasks.core.names import PERF_SCENARIOS
from tasks.steps.registry import AFTER_ENGINES, BEFORE_ENGINES, ENGINE_STEPS, SCENARIO_STEPS, STEPS, required_run_steps

log = logging.getLogger("dayone.airflow")

# The scenario steps of an engine, in the registry's order: its own until measuring, the performance
# scenarios over its position's engines together, then its own again until teardown.
MEASURING = tuple(s for s in SCENARIO_STEPS if s in PERF_SCENARIOS)
BEFORE_MEASURING = SCENARIO_STEPS[:SCENARIO_STEPS.index(MEASURING[0])]
AFTER_MEASURING = SCENARIO_STEPS[SCENARIO_STEPS.index(MEASURING[-1]) + 1:]
assert SCENARIO_STEPS == (*BEFORE_MEASURING, *MEASURING, *AFTER_MEASURING), "performance steps must be consecutive"
# deploy, readiness and teardown have tasks of their own around the scenario steps
assert ENGINE_STEPS == ("deploy", "wait_ready", *SCENARIO_STEPS, "teardown"), "the engine tasks must follow the registry"

ENGINES = "engines"  # the mapped task group: one instance per engine of the run
TURN = "wait_turn"  # its first task: the engine before it on the same node is torn down
ARRIVED = BEFORE_MEASURING[-1] if BEFORE_MEASURING else "wait_ready"  # an engine's last task before measuring
# each instance of the group is named by its engine (Airflow renders it after the task's templates)
NAMED_BY_ENGINE = "{{ task.engine }}"
NAMED_BY_ARGUMENT = "{{ engine }}"  # a @task's: named_by_engine(name) puts it in the task's context

NIGHTLY_SCHEDULE_VARIABLE = "dayone_nightly_schedule"
NIGHTLY_CONFIG_VARIABLE = "dayone_nightly_config"
NIGHTLY_ACCEPT_VARIABLE = "dayone_nightly_accept"


def task_id(step: str) -> str:
    """The id of the task that runs `step` (or the turn's wait, TURN) for an engine of the run."""
    return f"{ENGINES}.{step}"


def named_by_engine(name: str) -> str:
    """Name this @task's map index by its engine (NAMED_BY_ARGUMENT), as Airflow documents for @task."""
    from airflow.sdk import get_current_context

    get_current_context()["engine"] = name
    return name


def retries(step: str) -> dict[str, Any]:
    """The step's Airflow retries, from the registry (tasks/steps/registry.py)."""
    n = STEPS[step].retries
    return {"retries": n, "retry_delay": pendulum.duration(seconds=10)} if n else {"retries": 0}


# ---- the graph -----------------------------------------------------------------------------------


def _step_task(step_name: str, together: bool = False):
    if step_name in RUNNER_STEPS:  # a runner pod under measure_from: cluster, this worker otherwise
        from dayone_airflow.step_pods import StepPodOperator

        # the first measurement waits for the position's engines; at later ones their tasks only wait
        arrived = task_id(ARRIVED) if together and step_name == MEASURING[0] else None
        return lambda name: StepPodOperator(task_id=step_name, step=step_name, engine=name, together=together,
                                            arrived_task_id=arrived, trigger_rule="all_done",
                                            map_index_template=NAMED_BY_ENGINE, **retries(step_name))
    assert not together, f"{step_name} measures engines together, so it must be a runner step"

    @task(task_id=step_name, trigger_rule="all_done", map_index_template=NAMED_BY_ARGUMENT, **retries(step_name))
    def _step(name, params=None, run_id=None):
        return run_step(step_name, params, run_id, named_by_engine(name))

    return _step


def _engine_tasks() -> Any:
    """An engine's tasks, from its turn to its teardown. Every step after readiness runs whatever became
    of the one before (all_done), so each records its outcome; the performance steps measure the
    position's engines together (rounds interleaved, ABBA) in the task of its first engine."""
    from dayone_airflow.kubernetes import EngineReadinessOperator
    from dayone_airflow.turns import WAIT_RETRIES, WaitTurnOperator

    @task_group(group_id=ENGINES)
    def engine(name):
        @task(map_index_template=NAMED_BY_ARGUMENT, **retries("deploy"))
        def deploy(name, params=None, run_id=None):
            run_step("deploy", params, run_id, named_by_engine(name))
            return name

        @task(trigger_rule="all_done", map_index_template=NAMED_BY_ARGUMENT, **retries("teardown"))
        def teardown(name, params=None, run_id=None):
            return run_step("teardown", params, run_id, named_by_engine(name))

        turn = WaitTurnOperator(task_id=TURN, engine=name, teardown_task_id=task_id("teardown"),
                                map_index_template=NAMED_BY_ENGINE, **WAIT_RETRIES)
        deployed = deploy(name)
        ready = EngineReadinessOperator(task_id="wait_ready", engine=deployed,  # deferrable on Kubernetes
                                        map_index_template=NAMED_BY_ENGINE)
        steps = [_step_task(s)(name) for s in BEFORE_MEASURING]
        steps += [_step_task(s, together=True)(name) for s in MEASURING]
        steps += [_step_task(s)(name) for s in AFTER_MEASURING]
        chain(turn, deployed, ready, *steps, teardown(name))

    return engine


def _is_backfill(dag_run: Any) -> bool:
    return str(getattr(dag_run, "run_type", "")).lower().endswith("backfill")


def evaluation(nightly: bool = False) -> None:
    """Add the evaluation's tasks to the DAG being defined, in the registry's order. `nightly` adds the
    steps the registry runs in the nightly alone, and pins from the digest catalog.

    The run config's params stay on the DAG alone. Airflow deep-copies the DAG's params into every task
    it creates, and serializes and validates each copy: 86 tasks times the form's schemas cost more than
    a second of CPU in every process that parses the DAG (each task's, under a real executor). A task's
    params are only merged over the DAG's when it runs (process_params), so tasks without their own lose
    nothing: the DAG shows them none while its tasks are created."""
    from airflow.sdk.definitions._internal.contextmanager import DagContext
    from airflow.sdk.definitions.param import ParamsDict

    dag = DagContext.get_current()
    form = dag.params
    object.__setattr__(dag, "params", ParamsDict())  # as the DAG's own converter sets it: no re-validation
    try:
        _evaluation_tasks(nightly)
    finally:
        object.__setattr__(dag, "params", form)


def _evaluation_tasks(nightly: bool) -> None:

    # all_done: on the nightly the plan follows the cleanup whatever became of it (a failed cleanup fails
    # the run's verdict, not its measurements)
    @task(task_id="plan", trigger_rule="all_done", **retries("plan"))
    def plan(params=None, run_id=None):
        return run_step("plan", params, run_id)

    @task(task_id="pin", **retries("pin"))
    def pin(params=None, run_id=None):
        return run_step("pin", params, run_id)

    @task(task_id="pin", **retries("pin"))
    def pin_dated(params=None, run_id=None, logical_date=None, dag_run=None):
        # a manual run without a logical date has no catalog entry to read or write: it pins now
        return run_step("pin", params, run_id, logical_date=logical_date, backfill=_is_backfill(dag_run))

    @task(task_id="cleanup", **retries("cleanup"))
    def cleanup(params=None, run_id=None):
        return run_step("cleanup", params, run_id)

    @task(task_id="compare", trigger_rule="all_done", **retries("compare"))
    def compare(params=None, run_id=None):
        from airflow.sdk.exceptions import AirflowFailException

        from tasks.compare.nightly import RegressionFound

        try:
            return run_step("compare", params, run_id, accepted_run_ids=nightly_accepted())
        except RegressionFound as exc:  # a verdict, not a hiccup: a retry would find the same
            raise AirflowFailException(str(exc)) from None

    @task(trigger_rule="all_done", **retries("validate"))
    def validate(params=None, run_id=None):
        return run_step("validate", params, run_id)

    @task(trigger_rule="all_done", outlets=[ARCHIVED_RUN], **retries("archive"))
    def archive(params=None, run_id=None, outlet_events=None):
        result = run_step("archive", params, run_id)
        outlet_events[ARCHIVED_RUN].extra = archive_event_extra(dayone_run_id(run_id), result["data"])
        return result

    @task(**retries("report"))
    def report(params=None, run_id=None):
        return run_step("report", params, run_id)

    # all_done: a config the plan rejects skips everything after it; the verdict must still fail the run
    @task(task_id="conclude", trigger_rule="all_done")
    def conclude_run(params=None, run_id=None):
        return conclude(params, run_id, required_run_steps(nightly))

    @task(task_id="turns")
    def engines_in_turn(planned):
        # the plan's order of turns: an engine's map index is its place here (turns.py reads it so)
        return [turn["engine"] for turn in planned["data"]["turns"]]

    # each run-level step's task; the registry says where it runs and whether dayone_eval has it
    run_level = {"cleanup": cleanup, "plan": plan, "pin": pin_dated if nightly else pin, "compare": compare,
                 "validate": validate, "archive": archive, "report": report}
    in_graph = [s for s in (*BEFORE_ENGINES, *AFTER_ENGINES) if nightly or not STEPS[s].nightly_only]
    made = {s: run_level[s]() for s in in_graph}
    before = [made[s] for s in BEFORE_ENGINES if s in made]
    after = [made[s] for s in AFTER_ENGINES if s in made]
    chain(*before)
    names = engines_in_turn(made["plan"])
    before[-1] >> names.operator
    _engine_tasks().expand(name=names) >> after[0]  # its leaf: every engine's teardown (all_done)
    chain(*after, conclude_run())


def nightly_config() -> dict[str, Any] | None:
    """The run config a scheduled nightly run evaluates: the Airflow Variable `dayone_nightly_config`
    (YAML or JSON, may name a `preset`), read at parse as the nightly's param defaults; None while it is
    unset (the params' own defaults: the custom preset, RunConfig's defaults). A scheduled run has no
    conf, so this is the only way to choose what it measures. A value that is not a valid run config fails the DAG's import
    with the field and the fix: a nightly must not quietly measure some other config.
    """
    import yaml
    from airflow.sdk import Variable

    from tasks.config import ConfigError, parse_run_config

    try:
        text = Variable.get(NIGHTLY_CONFIG_VARIABLE, default=None)
    except Exception as exc:  # noqa: BLE001  (no metadata DB or API at parse time: the params' defaults)
        log.warning("Variable %s unreadable (%s); the nightly's params keep their defaults", NIGHTLY_CONFIG_VARIABLE, exc)
        return None
    if not text:
        return None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"Variable {NIGHTLY_CONFIG_VARIABLE} is not YAML or JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"Variable {NIGHTLY_CONFIG_VARIABLE}: a run config (a YAML or JSON mapping) is needed, "
                         f"got {type(doc).__name__}")
    try:
        parse_run_config(doc)
    except ConfigError as exc:
        raise ValueError(f"Variable {NIGHTLY_CONFIG_VARIABLE}: {exc}") from None
    return doc


def nightly_accepted() -> tuple[str, ...]:
    """Run ids a person accepted as the nightly's new level: the Airflow Variable `dayone_nightly_accept`
    (one run id, or several separated by commas or spaces), read when compare runs. An accepted run becomes
    a good run and the reference of later comparisons; the run that reads it records the acceptance in its
    run index, so clearing the Variable later undoes nothing (tasks/compare/nightly.py)."""
    from airflow.sdk import Variable

    text = Variable.get(NIGHTLY_ACCEPT_VARIABLE, default=None) or ""
    return tuple(dict.fromkeys(part for part in text.replace(",", " ").split() if part))


def nightly_schedule() -> str | None:
    """The nightly's schedule: the Airflow Variable `dayone_nightly_schedule` (cron or preset), else None.

    None until someone sets the Variable: unpausing the nightly (the Trigger dialog does it) then creates
    no scheduled run on its own with the run config's defaults; manual runs and triggers work as ever.
    """
    from airflow.sdk import Variable

    try:
        return Variable.get(NIGHTLY_SCHEDULE_VARIABLE, default=None) or None
    except Exception as exc:  # noqa: BLE001  (no metadata DB or API at parse time: schedule nothing)
        log.warning("Variable %s unreadable (%s); the nightly is unscheduled", NIGHTLY_SCHEDULE_VARIABLE, exc)
        return None
