"""Engines sharing a node run one after another; engines on separate nodes run side by side, measured together."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from product_fixtures import small_config

from tasks.steps.lanes import MAX_ENGINES_PER_NODE, check_lanes, lanes, positions, turns
from tasks.config import ConfigError, parse_run_config

REPO = Path(__file__).resolve().parents[2]


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


def test_each_turn_names_the_engine_before_it_on_the_node_and_the_engines_measured_with_it():
    cfg = _cfg([{"name": "a", "dialect": "sglang", "node": "n1"}, {"name": "b", "dialect": "vllm", "node": "n1"},
                {"name": "c", "dialect": "sglang", "node": "n2"}])
    assert turns(cfg) == [
        {"engine": "a", "position": 0, "after": None, "together": ["a", "c"]},
        {"engine": "c", "position": 0, "after": None, "together": ["a", "c"]},
        {"engine": "b", "position": 1, "after": "a", "together": ["b"]},
    ]


def _task_instances(run):
    """(task id, engine or None, state, start, end) of every task instance of the run; a mapped one's
    engine is the name Airflow shows for it (its rendered map index; its index while it never ran)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == run.dag_id,
                                                         TaskInstance.run_id == run.run_id)).all()
        return [(ti.task_id, (ti.rendered_map_index or str(ti.map_index)) if ti.map_index >= 0 else None,
                 str(ti.state), ti.start_date, ti.end_date) for ti in tis]


def _request_rows(run, run_root, scenario: str):
    from dayone_airflow.glue import dayone_run_id
    from tasks.state.storage import RunDir

    return [r for r in RunDir(dayone_run_id(run.run_id), run_root).read_rows("requests") if r.get("scenario") == scenario]


def test_engines_on_one_node_take_turns_and_engines_on_two_nodes_are_measured_together(dagbag, s3_conn, run_root):
    """a and b share node n1, c is on n2: b deploys only after a is torn down; a and c are measured
    together, their rounds interleaved; every task instance is a named engine's or a run-level step's."""
    from dayone_airflow.pipeline import ENGINES, TURN, task_id
    from tasks.steps.registry import ENGINE_STEPS

    engines = [{"name": "sim-a", "dialect": "sglang", "launcher": "sim", "node": "n1"},
               {"name": "sim-b", "dialect": "vllm", "launcher": "sim", "node": "n1"},
               {"name": "sim-c", "dialect": "sglang", "launcher": "sim", "node": "n2"}]
    conf = small_config(f"lanes-{time.time_ns()}", engines)
    conf["scenarios"]["short"] = {"concurrency": [1], "rounds": 2, "requests_per_round": 4}
    run = dagbag.get_dag("dayone_eval").test(run_conf=conf)
    assert str(run.state).endswith("success"), run.state
    tis = _task_instances(run)

    # no empty engine slots: each task instance is a run-level step's or one of the run's engines', by name
    engine_tasks = {task_id(s) for s in (TURN, *ENGINE_STEPS)}
    assert {t for t, engine, *_ in tis if engine is None} == {"plan", "pin", "turns", "validate", "archive",
                                                              "report", "conclude"}
    for name in ("sim-a", "sim-b", "sim-c"):
        assert sorted(t for t, engine, *_ in tis if engine == name) == sorted(engine_tasks), name
    assert len(tis) == 7 + 3 * len(engine_tasks)
    assert all(t.startswith(f"{ENGINES}.") for t, engine, *_ in tis if engine is not None)
    assert not [(t, e) for t, e, state, *_ in tis if not state.endswith("success")], tis

    by = {(engine, t.removeprefix(f"{ENGINES}.")): (start, end) for t, engine, _, start, end in tis if engine}
    # b's turn: its deploy started after a's teardown ended
    assert by[("sim-b", "deploy")][0] >= by[("sim-a", "teardown")][1], "b deployed before a was torn down"
    # a and c together: both up through the one measurement, whose rounds alternate (ABBA)
    rows = _request_rows(run, run_root, "short")
    started: dict[tuple[str, int], float] = {}
    for r in rows:
        started[(r["engine"], r["round"])] = min(started.get((r["engine"], r["round"]), r["send_ts"]), r["send_ts"])
    order = sorted((k for k in started if k[0] != "sim-b"), key=started.get)
    assert [rnd for _, rnd in order] == [1, 1, 2, 2], order
    assert [e for e, _ in order[:2]] == list(reversed([e for e, _ in order[2:]])), order  # A B B A
    assert max(by[("sim-a", "warmup")][1], by[("sim-c", "warmup")][1]) <= by[("sim-a", "short")][0]
    b_rounds = sorted(v for k, v in started.items() if k[0] == "sim-b")
    assert b_rounds and b_rounds[0] >= by[("sim-a", "teardown")][1].timestamp(), "b measured while a was up"


def test_a_failed_teardown_stops_the_next_engine_on_its_node(airflow_db, s3_conn, run_root, monkeypatch):
    """a's teardown fails: b, on the same node, is never deployed (a may still hold the node), and the run fails."""
    from airflow.dag_processing.dagbag import DagBag

    from dayone_airflow.pipeline import TURN, task_id
    from tasks.steps import registry

    real = registry.STEPS["teardown"]

    def teardown_failing_for_a(ctx, engine):
        done = real.run(ctx, engine)  # the simulator is stopped all the same
        if engine == "sim-a":
            raise RuntimeError("the node did not release sim-a")
        return done

    monkeypatch.setitem(registry.STEPS, "teardown", dataclasses.replace(real, run=teardown_failing_for_a, retries=0))
    dag = DagBag(dag_folder=str(REPO / "dags")).get_dag("dayone_eval")  # parsed with the teardown that fails
    engines = [{"name": "sim-a", "dialect": "sglang", "launcher": "sim", "node": "n1"},
               {"name": "sim-b", "dialect": "vllm", "launcher": "sim", "node": "n1"}]
    conf = small_config(f"lanes-{time.time_ns()}", engines)
    conf["scenarios"]["short"] = {"concurrency": [1], "rounds": 1, "requests_per_round": 2}
    run = dag.test(run_conf=conf)
    assert str(run.state).endswith("failed"), run.state
    state = {(t, engine): s.rsplit(".", 1)[-1].lower() for t, engine, s, *_ in _task_instances(run)}
    assert state[(task_id("teardown"), "sim-a")] == "failed"
    assert state[(task_id(TURN), "sim-b")] == "failed"
    # a task that never ran has no name in Airflow, only its index: sim-b is the second engine mapped
    assert state[(task_id("deploy"), "1")] == state[(task_id("wait_ready"), "1")] == "upstream_failed", state
    assert not _request_rows(run, run_root, "short") or {r["engine"] for r in _request_rows(run, run_root, "short")} == {"sim-a"}
