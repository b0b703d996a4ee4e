"""dayone_eval on a distributed Airflow: CeleryExecutor, two workers that share no disk, only S3.

The stack (stack.py) is PostgreSQL, Redis, a SeaweedFS S3 server, the API server, scheduler, DAG processor
and triggerer, and Celery workers `worker-a` and `worker-b`, each with its own empty HOME, working
directory and DAYONE_WORKDIR, one task at a time each. A run is triggered through the REST API on the
simulator, as a user's client would, and judged through the API and the archive in S3: it succeeds with
steps of the same engine run by both workers, its archive complete and validated.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pandas as pd
import pytest

from stack import DistributedAirflow

# Stack start (about 30 s), a run of a few minutes on two busy cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DAG_ID = "dayone_eval"
BUCKET = "dayone-distributed"
ENGINE = "sim-sglang"
POSITION = "engines_0"  # the first engine position's tasks: the run's only engine
KILLED_STEP = "short"  # a benchmark step: rounds of requests, one partition of the requests table
RUN_TIMEOUT_S = 360
SHORT = {"concurrency": [1, 4], "rounds": 2, "requests_per_round": 8, "output_tokens": 64}
# The simulator preset (tasks/presets/sim.yaml) cut to one engine and the steps a Celery hop costs least on.
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
    },
    "archive": {"bucket": BUCKET},
    "request_timeout_s": 30,
}


def _finished(stack: DistributedAirflow, run_id: str, **wait: Any) -> None:
    state = stack.wait_for_run(DAG_ID, run_id, RUN_TIMEOUT_S, **wait)
    assert state == "success", f"run {run_id} {state}:\n{stack.failure_report(DAG_ID, run_id)}"


def _engine_steps(stack: DistributedAirflow, run_id: str) -> list[dict[str, Any]]:
    """The task instances of the engine's steps: the first engine position's (the run's only engine)."""
    return [ti for ti in stack.task_instances(DAG_ID, run_id)
            if ti["task_id"].startswith((f"{POSITION}.", f"{POSITION}_")) and ti["task_id"] != f"{POSITION}_due"]


def _step_name(ti: dict[str, Any]) -> str:
    """`engines_0.deploy`, `engines_0_short` -> deploy, short."""
    return ti["task_id"].rsplit(".", 1)[-1].removeprefix(f"{POSITION}_")


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


def test_a_simulator_run_succeeds_with_steps_of_one_engine_on_both_workers(distributed_stack):
    """worker-b is drained until worker-a has deployed the engine, then worker-a until worker-b has run one
    of the engine's steps: whichever worker is free takes the next task otherwise, and may take them all."""
    stack = distributed_stack
    first, second = (w.name for w in stack.workers)
    stack.set_consuming([first])
    phase = ["deploying"]

    def hand_over() -> None:
        steps = {_step_name(ti): ti for ti in _engine_steps(stack, run_id) if ti["state"] == "success"}
        if phase[-1] == "deploying" and "deploy" in steps:
            stack.set_consuming([second])
            phase.append("drained")
        elif phase[-1] == "drained" and any(ti["hostname"] == second for ti in steps.values()):
            stack.set_consuming([first, second])
            phase.append("both")

    try:
        run_id = stack.trigger(DAG_ID, RUN_CONF)
        _finished(stack, run_id, while_waiting=hand_over)
    finally:
        stack.set_consuming([first, second])

    steps = _engine_steps(stack, run_id)
    ran = {_step_name(ti): ti["hostname"] for ti in steps if ti["state"] == "success"}
    assert {"deploy", KILLED_STEP, "teardown"} <= set(ran), ran
    assert ran["deploy"] == first, ran
    assert set(ran.values()) == {first, second}, f"steps of {ENGINE} by worker: {ran}"

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


def _measured_requests() -> int:
    """Requests of the benchmark's measured rounds: `requests_per_round` per unit of concurrency."""
    return sum(SHORT["rounds"] * SHORT["requests_per_round"] for _ in SHORT["concurrency"])
