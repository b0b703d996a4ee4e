"""Every DAG imports without error, quickly, and without importing heavy libraries at parse time."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_PROBE = r"""
import json, sys, time
t = time.perf_counter()
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({
    "dags": sorted(bag.dag_ids),
    "errors": {k: str(v)[:500] for k, v in bag.import_errors.items()},
    "heavy": sorted(m for m in ("great_expectations", "matplotlib", "boto3", "aiohttp", "kubernetes")
                    if m in sys.modules),
    "tasks": {d: sorted(bag.dags[d].task_ids) for d in bag.dag_ids},
    "descriptions": {d: bag.dags[d].description for d in bag.dag_ids},
}))
"""


@functools.cache  # one fresh interpreter's parse serves the checks that read it (each took 20-60 s on a loaded CI)
def _dagbag() -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(REPO / "dags")], capture_output=True, text=True,
                         env=os.environ.copy(), timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@functools.cache
def _bag_here():
    """The DAG folder parsed in this process (the checks read it, none changes it)."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_dags_import_without_errors_or_heavy_imports():
    bag = _dagbag()
    assert bag["errors"] == {}
    assert "dayone_eval" in bag["dags"]
    assert "great_expectations" not in bag["heavy"], "great_expectations must not be imported at DAG parse time"
    assert "matplotlib" not in bag["heavy"]


def test_each_dag_says_what_it_is_in_the_dag_list():
    """The DAG list shows a description; the nightly's says it waits for its schedule Variable."""
    described = _dagbag()["descriptions"]
    assert set(described) >= {"dayone_eval", "dayone_nightly"}
    for dag_id, text in described.items():
        assert text and len(text) <= 120, (dag_id, text)
    assert "dayone_nightly_schedule" in described["dayone_nightly"]


def test_eval_dag_has_every_stage_in_order():
    tasks = _dagbag()["tasks"]["dayone_eval"]
    for stage in ("plan", "pin", "turns", "engines.wait_turn", "engines.deploy", "engines.wait_ready",
                  "engines.functional", "engines.warmup", "engines.short", "engines.prefix_cache",
                  "engines.teardown", "validate", "archive", "report", "conclude"):
        assert stage in tasks, stage


def test_the_graph_follows_the_step_registry():
    """Step names, their order and their retries come from tasks/steps/registry.py; the nightly cleans up first."""

    from dayone_airflow.pipeline import task_id
    from tasks.steps.registry import SCENARIO_STEPS, STEPS

    bag = _bag_here()
    step_of = {task_id(s): s for s in (*SCENARIO_STEPS, "teardown")}
    for dag_id in ("dayone_eval", "dayone_nightly"):
        dag = bag.dags[dag_id]
        chain, task = [], dag.get_task(task_id("wait_ready"))
        while True:
            following = [t for t in task.downstream_list if t.task_id in step_of]
            if not following:
                break
            task = following[0]
            chain.append(step_of[task.task_id])
        assert tuple(chain) == (*SCENARIO_STEPS, "teardown"), dag_id
        for tid, step in (("plan", "plan"), ("pin", "pin"), (task_id("deploy"), "deploy"), (task_id("short"), "short"),
                          (task_id("teardown"), "teardown"), ("archive", "archive"), ("report", "report")):
            assert dag.get_task(tid).retries == STEPS[step].retries, (dag_id, tid)
    # a measurement is retried only after a killed try: one that failed keeps its rows (tests/test_step_retry.py)
    assert STEPS["short"].retries > 0 and not STEPS["short"].retry_after_failure
    nightly = bag.dags["dayone_nightly"]
    assert nightly.get_task("cleanup").downstream_task_ids == {"plan"}
    assert "cleanup" not in bag.dags["dayone_eval"].task_ids


def test_the_run_level_tasks_follow_the_registrys_order():
    """Before and after the engine positions, each DAG chains the registry's run-level steps in its
    order; dayone_eval leaves out the steps the registry runs in the nightly alone."""

    from tasks.steps.registry import AFTER_ENGINES, BEFORE_ENGINES, STEPS

    bag = _bag_here()
    for dag_id, nightly in (("dayone_eval", False), ("dayone_nightly", True)):
        dag = bag.dags[dag_id]
        before, after = ([s for s in steps if nightly or not STEPS[s].nightly_only]
                         for steps in (BEFORE_ENGINES, AFTER_ENGINES))
        assert [s for s in (*BEFORE_ENGINES, *AFTER_ENGINES) if s in dag.task_ids] == [*before, *after], dag_id
        for earlier, later in (*zip(before, before[1:]), *zip(after, after[1:])):
            assert later in dag.get_task(earlier).downstream_task_ids, (dag_id, earlier, later)
        assert dag.get_task(before[-1]).downstream_task_ids == {"turns"}, dag_id  # the run's engines, mapped
        assert dag.get_task(after[0]).upstream_task_ids == {"engines.teardown"}, dag_id
        assert dag.get_task(after[-1]).downstream_task_ids == {"conclude"}, dag_id


def test_serialized_dags_stay_small_with_the_params_on_the_dag_alone():
    """Airflow copies DAG params into every task; each copy was serialized (1.8 MB per DAG, 4-5 s of CPU
    per parse). The run config's params live on the DAG only, and a task still receives them."""
    import json as _json

    from airflow.sdk.definitions.param import process_params
    from airflow.serialization.serialized_objects import DagSerialization

    bag = _bag_here()
    for dag_id in ("dayone_eval", "dayone_nightly"):
        dag = bag.dags[dag_id]
        size_kb = len(_json.dumps(DagSerialization.to_dict(dag))) / 1024
        assert size_kb <= 300, (dag_id, size_kb)
        assert all(not t.params for t in dag.tasks), dag_id
        assert len(dag.params) > 5
        task = dag.get_task("engines.short")
        params = process_params(dag, task, {"target": "local"}, suppress_exception=False)
        assert params["target"] == "local" and "engines" in params and "scenarios" in params


def test_the_engines_are_one_group_mapped_over_the_run_and_named_by_engine():
    """No engine positions: one task group over the plan's engines, each instance named by its engine,
    every task after readiness running whatever became of the one before (all_done), so each engine's
    steps record an outcome and a failed scenario stops no other."""

    from dayone_airflow.pipeline import ENGINES, MEASURING, NAMED_BY_ARGUMENT, NAMED_BY_ENGINE, TURN, task_id
    from tasks.steps.registry import ENGINE_STEPS

    for dag_id, dag in _bag_here().dags.items():
        engine_tasks = [t for t in dag.tasks if t.task_id.startswith(f"{ENGINES}.")]
        assert {t.task_id for t in engine_tasks} == {task_id(s) for s in (TURN, *ENGINE_STEPS)}, dag_id
        assert not any(t.task_id.startswith("engines_") for t in dag.tasks), dag_id
        for t in engine_tasks:
            assert t.get_needs_expansion() and t.map_index_template in (NAMED_BY_ENGINE, NAMED_BY_ARGUMENT), t.task_id
        rules = [str(dag.get_task(task_id(s)).trigger_rule).rsplit(".", 1)[-1].lower() for s in MEASURING]
        assert rules == ["all_done"] * len(MEASURING), rules
