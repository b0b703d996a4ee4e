"""The evaluation's task graph, shared by dayone_eval (a person's run) and dayone_nightly.

The graph follows the step registry (tasks/steps/registry.py) alone: its order, its retries, which
steps the nightly alone runs; the order is stated in docs/ARCHITECTURE.md, "The step order". Each task
runs one step through glue.run_step, which records its outcome; the engines of a position (lanes by
node, tasks/lanes.py) run in task groups engines_<p> and engines_<p>_after around one task per
performance scenario (engines_<p>_<scenario>) that measures them together. The measuring steps are
StepPodOperator tasks (step_pods.py): runner pods under kubernetes.measure_from: cluster, this worker otherwise.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from airflow.sdk import chain, task, task_group

from dayone_airflow.assets import ARCHIVED_RUN, archive_event_extra
from dayone_airflow.glue import conclude, dayone_run_id, run_step
from tasks.k8s.runner_pods import RUNNER_STEPS
from tasks.lanes import MAX_ENGINES_PER_NODE
from tasks.scenarios import PERF_SCENARIOS
from tasks.steps.registry import AFTER_ENGINES, BEFORE_ENGINES, ENGINE_STEPS, SCENARIO_STEPS, STEPS, required_run_steps

log = logging.getLogger("dayone.airflow")

# The scenario steps of an engine position, in the registry's order: per engine until measuring, the
# performance scenarios over the position's engines together, then per engine again until teardown.
MEASURING = tuple(s for s in SCENARIO_STEPS if s in PERF_SCENARIOS)
BEFORE_MEASURING = SCENARIO_STEPS[:SCENARIO_STEPS.index(MEASURING[0])]
AFTER_MEASURING = SCENARIO_STEPS[SCENARIO_STEPS.index(MEASURING[-1]) + 1:]
assert SCENARIO_STEPS == (*BEFORE_MEASURING, *MEASURING, *AFTER_MEASURING), "performance steps must be consecutive"
# deploy, readiness and teardown have tasks of their own around the scenario steps
assert ENGINE_STEPS == ("deploy", "wait_ready", *SCENARIO_STEPS, "teardown"), "the engine tasks must follow the registry"

NIGHTLY_SCHEDULE_VARIABLE = "dayone_nightly_schedule"
NIGHTLY_CONFIG_VARIABLE = "dayone_nightly_config"
NIGHTLY_ACCEPT_VARIABLE = "dayone_nightly_accept"


def task_id(step: str, position: int = 0) -> str:
    """The id of the task that runs `step` for the engines of `position`."""
    if step in MEASURING:
        return f"engines_{position}_{step}"
    if step in (*AFTER_MEASURING, "teardown"):
        return f"engines_{position}_after.{step}"
    return f"engines_{position}.{step}"


def retries(step: str) -> dict[str, Any]:
    """The step's Airflow retries, from the registry (tasks/steps/registry.py)."""
    n = STEPS[step].retries
    return {"retries": n, "retry_delay": pendulum.duration(seconds=10)} if n else {"retries": 0}


# ---- the graph -----------------------------------------------------------------------------------


def _step_task(step_name: str):
    if step_name in RUNNER_STEPS:  # a runner pod under measure_from: cluster, this worker otherwise
        from dayone_airflow.step_pods import StepPodOperator

        return lambda name: StepPodOperator(task_id=step_name, step=step_name, engine=name, trigger_rule="all_done",
                                            **retries(step_name))

    @task(task_id=step_name, trigger_rule="all_done", **retries(step_name))
    def _step(name, params=None, run_id=None):
        return run_step(step_name, params, run_id, name)

    return _step


def _engines_up(position: int, handles: dict[str, Any]) -> Any:
    """Deploy, readiness and the steps before measuring, per engine of the position."""

    @task_group(group_id=f"engines_{position}")
    def engine(name):
        @task(**retries("deploy"))
        def deploy(name, params=None, run_id=None):
            run_step("deploy", params, run_id, name)
            return name

        from dayone_airflow.kubernetes import EngineReadinessOperator

        deployed = deploy(name)
        ready = EngineReadinessOperator(task_id="wait_ready", engine=deployed)  # deferrable on Kubernetes
        steps = [_step_task(s)(name) for s in BEFORE_MEASURING]
        chain(ready, *steps)
        handles.update(deployed=deployed, last=(steps or [ready])[-1])

    return engine


def _measured_together(position: int, scenario: str) -> Any:
    """A performance scenario over every engine of the position at once: rounds interleaved (ABBA)."""

    # The first: all_done, so an engine whose warmup failed does not stop the others' measurement; the
    # engines are pulled, not passed, and a position with none (or none ready) skips. The later ones:
    # none_skipped, so they follow a failed scenario but an empty position costs one task, not four.
    first = scenario == MEASURING[0]
    from dayone_airflow.step_pods import StepPodOperator

    return StepPodOperator(task_id=f"engines_{position}_{scenario}", step=scenario, position=position,
                           trigger_rule="all_done" if first else "none_skipped", **retries(scenario))


def _engines_after(position: int, handles: dict[str, Any]) -> Any:
    """The evidence steps after measuring, and the teardown, per engine of the position."""

    @task_group(group_id=f"engines_{position}_after")
    def engine(name):
        @task(**retries("teardown"))
        def teardown(name, params=None, run_id=None):
            return run_step("teardown", params, run_id, name)

        steps = [_step_task(s)(name) for s in AFTER_MEASURING]
        torn_down = teardown.override(trigger_rule="all_done")(name)
        chain(*steps, torn_down)
        handles.update(first_after=(steps or [torn_down])[0], teardown=torn_down)

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
    @task(task_id="plan", trigger_rule="all_done")
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

        from tasks.compare import RegressionFound

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

    def engines_due(position: int):
        # Position p starts after the pin and after every teardown of position p-1 (skipped when that
        # engine never deployed); a failed teardown stops it, since the old engine may still hold the node.
        @task(task_id=f"engines_{position}_due", trigger_rule="none_failed_min_one_success")
        def due(planned):
            return planned["data"]["positions"][position]

        return due

    # each run-level step's task; the registry says where it runs and whether dayone_eval has it
    run_level = {"cleanup": cleanup, "plan": plan, "pin": pin_dated if nightly else pin, "compare": compare,
                 "validate": validate, "archive": archive, "report": report}
    in_graph = [s for s in (*BEFORE_ENGINES, *AFTER_ENGINES) if nightly or not STEPS[s].nightly_only]
    made = {s: run_level[s]() for s in in_graph}
    before = [made[s] for s in BEFORE_ENGINES if s in made]
    after = [made[s] for s in AFTER_ENGINES if s in made]
    chain(*before)
    planned = made["plan"]
    engine_ends: list[Any] = []
    previous_teardown = None
    for p in range(MAX_ENGINES_PER_NODE):
        names = engines_due(p)(planned)
        before[-1] >> names.operator
        if previous_teardown is not None:
            previous_teardown >> names.operator
        handles: dict[str, Any] = {}
        _engines_up(p, handles).expand(name=names)
        measured = [_measured_together(p, s) for s in MEASURING]
        _engines_after(p, handles).expand(name=names)
        names >> measured[0]
        chain(handles["last"], *measured, handles["first_after"])
        previous_teardown = handles["teardown"]
        engine_ends.append(handles["teardown"])  # all_done: after every step of the position
    engine_ends >> after[0]
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
    run index, so clearing the Variable later undoes nothing (tasks/compare.py)."""
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
