"""Engines sharing a node run one after another; engines on separate nodes run side by side."""

from __future__ import annotations

import time

import pytest
from product_fixtures import small_config

from dayone_airflow.pipeline import task_id
from tasks.lanes import MAX_ENGINES_PER_NODE, check_lanes, lanes, positions
from tasks.config import ConfigError, parse_run_config


def _cfg(engines):
    return parse_run_config({"engines": engines})


def test_positions_put_each_node_in_its_own_lane():
    cfg = _cfg([
        {"name": "a", "dialect": "sglang", "node": "n1"},
        {"name": "b", "dialect": "vllm", "node": "n1"},
        {"name": "c", "dialect": "sglang", "node": "n2"},
        {"name": "d", "dialect": "sglang", "node_selector": {"gpu": "h200"}},
        {"name": "e", "dialect": "sglang", "node_selector": {"gpu": "h200"}},
        {"name": "f", "dialect": "sglang"},
    ])
    assert lanes(cfg) == {"node:n1": ["a", "b"], "node:n2": ["c"], "selector:gpu=h200": ["d", "e"],
                          "unplaced": ["f"]}
    assert positions(cfg) == [["a", "c", "d", "f"], ["b", "e"], [], []][:MAX_ENGINES_PER_NODE]


def test_too_many_engines_on_one_node_is_rejected_naming_the_field():
    cfg = _cfg([{"name": f"e{i}", "dialect": "sglang", "node": "n1"} for i in range(MAX_ENGINES_PER_NODE + 1)])
    with pytest.raises(ConfigError) as info:
        check_lanes(cfg)
    assert f"engines[{MAX_ENGINES_PER_NODE}].node" in str(info.value) and "Fix:" in str(info.value)


@pytest.mark.parametrize("dag_id", ["dayone_eval", "dayone_nightly"])
def test_each_position_waits_for_every_teardown_of_the_one_before(dagbag, dag_id):
    dag = dagbag.get_dag(dag_id)
    for p in range(1, MAX_ENGINES_PER_NODE):
        due = dag.get_task(f"engines_{p}_due")
        assert task_id("teardown", p - 1) in due.upstream_task_ids
        assert due.trigger_rule == "none_failed_min_one_success"
        assert f"engines_{p}_due" in dag.get_task(f"engines_{p}.deploy").upstream_task_ids
    assert dag.get_task("archive").outlets  # the archived run is an Asset


def test_engines_on_one_node_never_overlap(dagbag, s3_conn, run_root):
    """a and b share node n1, c is on n2: b deploys only after a is torn down; a and c share position 0."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    engines = [{"name": "sim-a", "dialect": "sglang", "launcher": "sim", "node": "n1"},
               {"name": "sim-b", "dialect": "vllm", "launcher": "sim", "node": "n1"},
               {"name": "sim-c", "dialect": "sglang", "launcher": "sim", "node": "n2"}]
    conf = small_config(f"lanes-{time.time_ns()}", engines)
    conf["scenarios"]["short"] = {"concurrency": [1], "rounds": 1, "requests_per_round": 4}
    run = dagbag.get_dag("dayone_eval").test(run_conf=conf)
    assert str(run.state).endswith("success"), run.state
    with create_session() as session:
        tis = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == "dayone_eval",
                                                         TaskInstance.run_id == run.run_id)).all()
        by = {}
        for ti in tis:
            if ti.task_id.startswith("engines_") and "." in ti.task_id and ti.map_index >= 0:
                group, step = ti.task_id.split(".", 1)
                group = group.removesuffix("_after")  # the same position's engines, mapped alike
                engine = _engine_of(session, ti, group)
                by[(engine, step)] = (ti.start_date, ti.end_date, group)
            elif ti.task_id in (task_id("short", 0), task_id("short", 1)):  # measures its position's engines
                by[("position", ti.task_id)] = (ti.start_date, ti.end_date, ti.task_id)
    assert by[("sim-a", "deploy")][2] == by[("sim-c", "deploy")][2] == "engines_0"
    assert by[("sim-b", "deploy")][2] == "engines_1"
    assert by[("sim-b", "deploy")][0] >= by[("sim-a", "teardown")][1], "b started before a was torn down"
    a_deploy, a_teardown = by[("sim-a", "deploy")][0], by[("sim-a", "teardown")][1]
    for b_start, b_end, _ in (by[("sim-b", "startup_findings")], by[("position", task_id("short", 1))]):
        assert b_start >= a_teardown or b_end <= a_deploy  # the measured engine never had its node-mate up
    a_c = by[("position", task_id("short", 0))]
    assert by[("sim-a", "warmup")][1] <= a_c[0] <= a_c[1] <= by[("sim-a", "teardown")][0]


def _engine_of(session, ti, group: str) -> str:
    """The engine a mapped instance ran: the XCom its deploy returned."""
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    return session.scalars(select(XComModel.value).where(
        XComModel.dag_id == ti.dag_id, XComModel.run_id == ti.run_id, XComModel.task_id == f"{group}.deploy",
        XComModel.map_index == ti.map_index, XComModel.key == "return_value")).first()
