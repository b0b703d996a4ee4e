"""Turns between the mapped engines of a run (tasks/steps/lanes.py `turns`, from the plan): an engine deploys
after the engine before it in its lane is torn down, and the first engine of a position measures the
position's engines together while the others wait for its outcome.

Every wait reschedules its task (no worker slot held between looks, and dag.test() runs it like the
scheduler); what is waited for is the other engine's task state in this Airflow run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

FINISHED = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})
LOOK_AGAIN_MAX_S = 30  # the longest pause between looks: one short task process per 30 s of waiting
# The shortest: a scheduler that queues the rescheduled try before it has read the executor's word on the last
# one marks the task failed ("finished with state success, but the task instance's state attribute is
# queued"); a loaded scheduler was seen to take 2.4 s to read it, so the first look again waits 10 s.
LOOK_AGAIN_MIN_S = 10
# A wait lost to that race (or to a worker) looks again on a retry: waiting is idempotent.
WAIT_RETRIES = {"retries": 2, "retry_delay": dt.timedelta(seconds=10)}


def engine_turn(context: Any, engine: str) -> tuple[dict[str, Any], list[str]]:
    """The engine's turn, and the run's engines in the order they are mapped, from the plan's result."""
    planned = context["ti"].xcom_pull(task_ids="plan")
    order = planned["data"]["turns"]
    return next(t for t in order if t["engine"] == engine), [t["engine"] for t in order]


def state_of(context: Any, task_id: str, engine: str, order: list[str]) -> str | None:
    """The state of `engine`'s instance of the mapped task `task_id` in this run (None: not yet scheduled)."""
    ti, index = context["ti"], order.index(engine)
    states = ti.get_task_states(dag_id=ti.dag_id, map_index=index, task_ids=[task_id], run_ids=[ti.run_id])
    state = (states.get(ti.run_id) or {}).get(f"{task_id}_{index}")
    return None if state is None else str(state).rsplit(".", 1)[-1].lower()


def look_again(context: Any, why: str) -> None:
    """Give the worker slot back and look again later (LOOK_AGAIN_MIN_S, then longer, at most LOOK_AGAIN_MAX_S)."""
    import logging

    from airflow.sdk.exceptions import AirflowRescheduleException

    pause_s = min(LOOK_AGAIN_MAX_S, LOOK_AGAIN_MIN_S + 5 * int(context.get("task_reschedule_count") or 0))
    logging.getLogger("dayone.airflow").info("%s; looking again in %d s", why, pause_s)
    raise AirflowRescheduleException(dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=pause_s))


class WaitTurnOperator(BaseOperator):
    """Wait until the engine before this one in its lane (same node) is torn down; fail when its
    teardown failed or its own turn never came, since that engine may still hold the node."""

    template_fields: Sequence[str] = ("engine",)

    def __init__(self, *, engine: str, teardown_task_id: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.engine, self.teardown_task_id = engine, teardown_task_id

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        turn, order = engine_turn(context, self.engine)
        before = turn["after"]
        if before is None:
            return {"engine": self.engine, "after": None}
        torn_down = state_of(context, self.teardown_task_id, before, order)
        if torn_down not in FINISHED:
            look_again(context, f"engine {self.engine} waits for {before} (same node) to be torn down")
        came = state_of(context, self.task_id, before, order)
        if came != "success":
            raise AirflowFailException(f"engine {self.engine} shares a node with {before}, whose own turn ended "
                                       f"{came}: the node's lane is stopped, so {self.engine} is not deployed")
        if torn_down not in ("success", "skipped"):
            raise AirflowFailException(f"engine {self.engine} shares a node with {before}, whose teardown ended "
                                       f"{torn_down}: {before} may still hold the node, so {self.engine} is not deployed")
        return {"engine": self.engine, "after": before, "teardown": torn_down}


def measuring_engines(context: Any, step: str, engine: str, arrived_task_id: str | None) -> list[str] | None:
    """The engines `engine`'s task of performance step `step` measures: the whole position for its first
    engine, once every other engine of the position has ended its task `arrived_task_id` (its steps
    before measuring; None: no wait); None for another engine, once the first one's task of this step
    has ended (its outcome is then recorded)."""
    turn, order = engine_turn(context, engine)
    first, *others = turn["together"]
    if engine == first:
        if arrived_task_id:
            arriving = [e for e in others if state_of(context, arrived_task_id, e, order) not in FINISHED]
            if arriving:
                look_again(context, f"{step} of {', '.join(turn['together'])} waits for {', '.join(arriving)}")
        return list(turn["together"])
    if state_of(context, context["ti"].task_id, first, order) not in FINISHED:
        look_again(context, f"engine {engine} is measured with {first}: waiting for its {step}")
    return None


def measured_with_first(context: Any, step: str, engine: str) -> dict[str, Any]:
    """The outcome the position's first engine recorded for `engine`, as this engine's task's own."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from tasks.state.documents import outcome_doc

    from dayone_airflow.glue import run_dir

    turn, _ = engine_turn(context, engine)
    first = turn["together"][0]
    outcome = run_dir(context["run_id"]).read_json(outcome_doc(step, engine)) or {}
    status, detail = outcome.get("status"), outcome.get("detail") or ""
    if status == "not_attempted":
        raise AirflowSkipException(detail)
    if status not in ("ok", "skipped"):
        raise AirflowFailException(detail or f"{step} of {engine}: {first}'s task, which measures it, ended "
                                              "without recording an outcome")
    return {"step": step, "engine": engine, "status": status, "measured_with": first}
