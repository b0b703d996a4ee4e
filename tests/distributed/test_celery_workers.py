"""dayone_eval on a distributed Airflow: CeleryExecutor, two workers that are hosts of their own, sharing
nothing but S3 and the engine's endpoint.

The stack (stack.py) is PostgreSQL, Redis, a SeaweedFS S3 server, the API server, scheduler, DAG processor
and triggerer, and Celery workers `worker-a` and `worker-b`, one task at a time each. Each worker is a node
(nodes.py), built with the kernel's namespaces on this one machine:

- network: `ip netns add` per worker, a veth from it to a bridge in a hub namespace, 10.231.0.N/24 on its
  end; no address or route is added to this machine's own namespace, and everything is deleted at the
  stack's end, on failure too (and a dead run's leftovers at the next start). The services (PostgreSQL,
  Redis, S3, the API server) appear on each worker's own 127.0.0.1 through loopback_forward.py; an engine
  listens on its worker's bridge address (DAYONE_ENGINE_HOST), the only way the other worker reaches it;
- UTS: its own host name, which Airflow records as the task instance's `hostname` and DayOne's local
  target as the engine's node;
- mount: its own /tmp and /etc/hosts, and a tmpfs of its own for HOME, AIRFLOW_HOME and DAYONE_WORKDIR.

The process table stays shared: the test kills a worker's processes from outside, as a host dies, and an
engine a worker started lives on in its own session as it would in a pod of its own. The file audit
(file_audit.py, fanotify on every worker's tmpfs) records each open by one worker of a file on another
worker's disk; every test asserts there was none, and a planted read (planted_dag.py) proves the audit
fails a test that has one. A run is triggered through the REST API on the simulator, as a user's client
would, and judged through the API, the audit and the archive in S3:

- a task that opens a file another worker's task wrote fails the audit, naming both workers and the path;
- one run of the simulator, which two tests judge: it succeeds with steps of the same engine run by both
  workers, the engine reached at its worker's address, its archive complete and validated; and a kill -9
  of the worker running its benchmark step (everything it runs, as when its host dies) is retried on the
  other worker, the run succeeding with that step's partition holding the retry's rows only.
"""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pandas as pd
import pytest

from run_progress import CAP_S
from stack import STAGING, TASK_HEARTBEAT_TIMEOUT_S, CrossNodeRead, DistributedAirflow

from tasks.state.partitions import TRY_POINTER

# Stack start (about 30 s), one run of a few minutes on two busy cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(CAP_S + 600)]  # the shared run's wait (run_progress.py), then the checks

DAG_ID = "dayone_eval"
PLANTED = "planted_cross_worker_read"  # planted_dag.py
BUCKET = "dayone-distributed"
ENGINE = "sim-sglang"
ENGINES = "engines"  # the mapped group of the run's engines: here its only engine
KILLED_STEP = "short"  # a benchmark step: rounds of requests, one partition of the requests table
SHORT = {"concurrency": [1, 4], "rounds": 2, "requests_per_round": 8, "output_tokens": 64}
# The simulator preset (tasks/config/presets/sim.yaml) cut to one engine and the steps a Celery hop costs least on.
# 10 ms a token: the benchmark step measures for about ten seconds, long enough to be killed mid-round.
RUN_CONF: dict[str, Any] = {
    "preset": "local-sim",
    "engines": [{"name": ENGINE, "dialect": "sglang", "launcher": "sim",
                 "sim_profile": {"jit_delay_s": 0.3, "reasoning": True, "itl_s": 0.01}}],
    "scenarios": {
        "short": SHORT,
        "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
        "long_context": {"lengths": [4096], "depths": [0.5], "output_tokens": 16},
        "boundary": {"enabled": False},
        "prefix_cache": {"prompt_tokens": 2000, "repeats": 2},
        "trace": {"enabled": False},
        "quality": {"enabled": False},
    },
    "archive": {"bucket": BUCKET},
    "request_timeout_s": 30,
}


def _finished(stack: DistributedAirflow, run_id: str, **wait: Any) -> None:
    state = stack.wait_for_run(DAG_ID, run_id, **wait)
    assert state == "success", f"run {run_id} {state}:\n{stack.failure_report(DAG_ID, run_id)}"


def _engine_steps(stack: DistributedAirflow, run_id: str) -> list[dict[str, Any]]:
    """The task instances of the engine's steps (the run's only engine), its turn's wait left out."""
    return [ti for ti in stack.task_instances(DAG_ID, run_id)
            if ti["task_id"].startswith(f"{ENGINES}.") and ti["task_id"] != f"{ENGINES}.wait_turn"]


def _step_name(ti: dict[str, Any]) -> str:
    """`engines.deploy`, `engines.short` -> deploy, short."""
    return ti["task_id"].rsplit(".", 1)[-1]


def _archive(stack: DistributedAirflow, run_id: str) -> tuple[dict[str, Any], str]:
    """The run's archive index (one document per run) and the engine's prefix."""
    from dayone_airflow.glue import dayone_run_id

    s3 = stack.s3.client()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    index_key = next((k for k in keys if "/_index/" in k and k.endswith(f"/{dayone_run_id(run_id)}.json")), None)
    assert index_key, f"no archive index for {run_id} among {keys}"
    index = json.loads(s3.get_object(Bucket=BUCKET, Key=index_key)["Body"].read())
    return index, index["prefixes"][ENGINE]


def _table(stack: DistributedAirflow, key: str) -> pd.DataFrame:
    body = stack.s3.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return pd.read_parquet(io.BytesIO(body))


def test_a_planted_read_of_a_file_another_worker_wrote_fails_the_audit(distributed_stack):
    """planted_dag.py: `write` on one worker, `read` of its file by path on the other. The read itself works
    here (every worker's disk is visible to the others, as on a shared disk), so only the audit can fail it."""
    stack = distributed_stack
    writer, reader = (w.name for w in stack.workers)  # both alive: this runs before the kill
    mark = stack.audit_mark()
    stack.consume(writer, "planted-write")
    stack.consume(reader, "planted-read")
    run_id = stack.trigger(PLANTED, {})
    state = stack.wait_for_run(PLANTED, run_id)
    ran = {ti["task_id"]: ti["hostname"] for ti in stack.task_instances(PLANTED, run_id)}
    assert state == "success" and ran == {"write": writer, "read": reader}, (state, ran)

    with pytest.raises(CrossNodeRead) as failed:
        stack.assert_no_cross_node_reads(since=mark)
    print(f"planted read, as the audit fails it:\n{failed.value}")
    assert f"{reader} opened a file {writer} wrote: " in str(failed.value), failed.value
    assert "planted.txt" in str(failed.value), failed.value


def _partition(stack: DistributedAirflow, run_id: str) -> tuple[str | None, list[str]]:
    """The benchmark's requests partition in the run's staging prefix (tasks/state/partitions.py): the try its
    pointer names, and every chunk key under it."""
    from dayone_airflow.glue import dayone_run_id

    bucket, prefix = STAGING.removeprefix("s3://").split("/", 1)
    base = f"{prefix}/{dayone_run_id(run_id)}/tables/requests/{ENGINE}/{KILLED_STEP}/"
    s3 = stack.s3.client()
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base)
    keys = [o["Key"][len(base):] for page in pages for o in page.get("Contents", ())]
    if TRY_POINTER not in keys:
        return None, keys
    pointer = json.loads(s3.get_object(Bucket=bucket, Key=base + TRY_POINTER)["Body"].read())
    return pointer["try"], [k for k in keys if k != TRY_POINTER]


@pytest.fixture(scope="module")
def handed_over_and_killed(distributed_stack) -> dict[str, Any]:
    """One run for the two tests after it (a run costs minutes of two loaded cores): worker-b is drained until
    worker-a has deployed the engine, then worker-a until worker-b has run one of the engine's steps
    (whichever worker is free takes the next task otherwise, and may take them all); then, with both taking
    tasks, once the benchmark step has stored rows in the staging prefix, the worker running it is killed
    (kill -9 of everything it runs, as when its host dies). Runs after the planted read, which needs both."""
    stack = distributed_stack
    first, second = (w.name for w in stack.workers)
    mark = stack.audit_mark()
    stack.set_consuming([first])
    phase = ["deploying"]
    victim: dict[str, Any] = {}
    run_id = ""

    def hand_over() -> None:
        steps = {_step_name(ti): ti for ti in _engine_steps(stack, run_id) if ti["state"] == "success"}
        if phase[-1] == "deploying" and "deploy" in steps:
            stack.set_consuming([second])
            phase.append("drained")
        elif phase[-1] == "drained" and any(ti["hostname"] == second for ti in steps.values()):
            stack.set_consuming([first, second])
            phase.append("both")

    def kill_the_benchmark_s_worker() -> None:
        """Once both take tasks and the benchmark step has stored rows, kill -9 the worker running it."""
        if victim or phase[-1] != "both":
            return
        ti = next((t for t in _engine_steps(stack, run_id) if _step_name(t) == KILLED_STEP), None)
        if not ti or ti["state"] != "running" or not ti.get("hostname"):
            return
        current, chunks = _partition(stack, run_id)
        stored = [k for k in chunks if current and k.startswith(current + "/")]
        if not stored:
            return
        victim.update(worker=ti["hostname"], task_id=ti["task_id"], map_index=ti["map_index"],
                      try_number=ti["try_number"], partition_try=current, chunks=stored, killed_at=time.time())
        stack.kill_worker(ti["hostname"])

    def watch() -> None:
        hand_over()
        kill_the_benchmark_s_worker()

    try:
        run_id = stack.trigger(DAG_ID, RUN_CONF)
        _finished(stack, run_id, while_waiting=watch)
    finally:
        stack.set_consuming([first, second])  # a killed worker is left out
    return {"run_id": run_id, "mark": mark, "first": first, "second": second, "phases": phase, "victim": victim}


def test_a_simulator_run_succeeds_with_steps_of_one_engine_on_both_workers(distributed_stack, handed_over_and_killed):
    """The run of `handed_over_and_killed`: the engine deployed by worker-a, its steps run by both workers,
    the engine reached at worker-a's address, its archive complete and validated."""
    stack, run = distributed_stack, handed_over_and_killed
    run_id, first, second, mark = run["run_id"], run["first"], run["second"], run["mark"]
    assert run["phases"] == ["deploying", "drained", "both"], run["phases"]
    steps = _engine_steps(stack, run_id)
    ran = {_step_name(ti): ti["hostname"] for ti in steps if ti["state"] == "success"}
    assert {"deploy", KILLED_STEP, "teardown"} <= set(ran), ran
    assert ran["deploy"] == first, ran
    assert set(ran.values()) == {first, second}, f"steps of {ENGINE} by worker: {ran}"
    # the engine listened on its worker's own address, where the other worker reached it
    deployment = _staged(stack, run_id, f"deployments/{ENGINE}.json")
    assert deployment["base_url"].split("//")[1].split(":")[0] == stack.worker(first).node.address, deployment
    stack.assert_no_cross_node_reads(since=mark)

    index, prefix = _archive(stack, run_id)
    assert not index["quarantined"], index
    s3 = stack.s3.client()
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]}
    for rel in ("manifest.json", "summary.json", "report.html", "validation.json", "tables/requests.parquet",
                "tables/rounds.parquet", "tables/checks.parquet", "tables/needles.parquet",
                "tables/cache_trials.parquet"):
        assert prefix + rel in keys, f"{rel} missing from the archive: {sorted(keys)}"
    validation = json.loads(s3.get_object(Bucket=BUCKET, Key=prefix + "validation.json")["Body"].read())
    assert validation["success"] is True, validation
    requests = _table(stack, prefix + "tables/requests.parquet")
    measured = requests[(requests["scenario"] == KILLED_STEP) & (requests["round"] >= 1)]
    assert len(measured) == _measured_requests(), measured[["concurrency", "round"]].value_counts()
    assert (measured["status"] == "ok").all()


def _staged(stack: DistributedAirflow, run_id: str, name: str) -> dict[str, Any]:
    """A document of the run's state in the staging prefix."""
    from dayone_airflow.glue import dayone_run_id

    bucket, prefix = STAGING.removeprefix("s3://").split("/", 1)
    key = f"{prefix}/{dayone_run_id(run_id)}/{name}"
    return json.loads(stack.s3.client().get_object(Bucket=bucket, Key=key)["Body"].read())


def _measured_requests() -> int:
    """Requests of the benchmark's measured rounds: `requests_per_round` per unit of concurrency."""
    return sum(SHORT["rounds"] * SHORT["requests_per_round"] for _ in SHORT["concurrency"])


def test_a_killed_worker_s_benchmark_step_is_retried_on_the_other_worker_and_replaces_its_partition(
        distributed_stack, handed_over_and_killed):
    stack, run = distributed_stack, handed_over_and_killed
    run_id, victim, mark = run["run_id"], run["victim"], run["mark"]
    assert victim, f"{KILLED_STEP} was never seen running with rows stored"

    tries = stack.tries(DAG_ID, run_id, victim["task_id"], victim["map_index"])
    seen = [(t["try_number"], t["state"], t["hostname"]) for t in tries]
    killed, last = tries[victim["try_number"] - 1], tries[-1]
    survivor = next(w.name for w in stack.workers if w.name != victim["worker"])
    assert killed["hostname"] == victim["worker"] and killed["state"] == "failed", seen
    assert last["try_number"] > killed["try_number"], (
        f"{victim['task_id']}: the try killed on {victim['worker']} was never retried (tries: {seen}), and the run "
        f"still ended {stack.run_state(DAG_ID, run_id)}")
    assert last["state"] == "success" and last["hostname"] == survivor, seen
    # the scheduler noticed the missing heartbeats, well before anything else would have ended the try
    assert pd.Timestamp(last["start_date"]).timestamp() - victim["killed_at"] < TASK_HEARTBEAT_TIMEOUT_S + 90

    # The partition is the retry's: its pointer moved on, and the killed try's chunks are gone.
    current, chunks = _partition(stack, run_id)
    assert current and current != victim["partition_try"], (current, victim)
    assert not [k for k in chunks if k.startswith(victim["partition_try"] + "/")], chunks

    index, prefix = _archive(stack, run_id)
    assert not index["quarantined"], index
    requests = _table(stack, prefix + "tables/requests.parquet")
    partition = requests[requests["scenario"] == KILLED_STEP]
    retry_started = pd.Timestamp(last["start_date"]).timestamp()
    # every archived row of the benchmark was sent by the retry, and exactly the planned requests
    assert (partition["send_ts"] >= retry_started).all(), partition[partition["send_ts"] < retry_started]
    measured = partition[partition["round"] >= 1]
    assert len(measured) == _measured_requests(), measured[["concurrency", "round"]].value_counts()
    assert not measured.duplicated(["concurrency", "round", "request_id"]).any()
    stack.assert_no_cross_node_reads(since=mark)

