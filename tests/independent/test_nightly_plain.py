"""dayone_nightly (`dag.test()` per night) against a plain server written for the test, whose benchmark
requests fail on some nights while its other requests (readiness, functional checks) still answer.

Night 1 is healthy and becomes the lineage's first good run. Night 2 fails every benchmark request:
the short step fails naming why, and compare fails naming the failed share (before: the failed rounds
were left out, no row, a green compare). Night 3 fails 40% of them: compare fails again, against night 1
(before: night 2 had become the baseline, and 40% against 100% is no regression). Night 4 is like night 3
with night 3 accepted through the Variable `dayone_nightly_accept`: it passes, and the acceptance is
recorded in its run index.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pytest
from plain_pipeline import REPO, external, scenarios
from plain_server import PlainServer

OUTPUT = 7  # the benchmark's output length: the checks ask for others
NIGHTS = [dt.datetime(2026, 10, d, 3, tzinfo=dt.timezone.utc) for d in (1, 2, 3, 4)]


class FailingBenchmark(PlainServer):
    """Answers HTTP 500 to the given share (in tenths) of its benchmark requests (token-ID prompts of the
    short scenario's output length, which no check asks for), by a fixed count so each round fails alike."""

    failing_tenths = 0
    _seen = 0

    def error_for(self, kind: str, body: dict[str, Any]) -> tuple[int, str] | None:
        prompt = body.get("prompt")
        if not (isinstance(prompt, list) and prompt and isinstance(prompt[0], int)) or body.get("max_tokens") != OUTPUT:
            return None
        self._seen += 1
        return (500, "engine fault") if self._seen % 10 < self.failing_tenths else None


def _conf(bucket: str, url: str) -> dict[str, Any]:
    return {
        "model": {"name": "plain-model", "context_limit_tokens": 4096},
        "engines": [external("plain", url)],
        "scenarios": {**scenarios(short={"concurrency": [2], "rounds": 2, "requests_per_round": 10,
                                         "input_tokens": 16, "output_tokens": OUTPUT}),
                      "warmup": False, "functional": {"enabled": True}, "capacity": {"enabled": False}},
        "archive": {"bucket": bucket},
        "request_timeout_s": 10,
    }


def _states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state).rsplit(".", 1)[-1].lower() for ti in run.get_task_instances() if ti.map_index <= 0}


def test_broken_nights_stay_red_until_a_person_accepts_the_new_level(airflow_db, s3_server, tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    from dayone_airflow.glue import dayone_run_id
    from tasks.state.storage import RunDir

    bucket = f"nightly-plain-{time.time_ns()}"
    root = tmp_path / "runs"
    runs, dirs = [], []
    with FailingBenchmark() as server, pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAYONE_WORKDIR", str(root))
        mp.setenv("AIRFLOW_CONN_DAYONE_S3", s3_server.connection_uri())
        for night, tenths in zip(NIGHTS, (0, 10, 4, 4)):
            server.failing_tenths = tenths
            if night == NIGHTS[3]:  # a person accepts night 3's level
                mp.setenv("AIRFLOW_VAR_DAYONE_NIGHTLY_ACCEPT", dirs[2].run_id)
            nightly = DagBag(dag_folder=str(REPO / "dags")).get_dag("dayone_nightly")
            runs.append(nightly.test(logical_date=night, run_after=night, run_conf=_conf(bucket, server.url)))
            dirs.append(RunDir(dayone_run_id(runs[-1].run_id), root))
    states = [_states(r) for r in runs]
    regressions = [d.read_json("regressions.json") or {} for d in dirs]

    # Night 1: the lineage's first run, nothing to compare; the functional checks ran.
    assert str(runs[0].state).endswith("success"), states[0]
    assert dirs[0].read_rows("checks")

    # Night 2: every benchmark request failed. The short step failed with the reason; compare failed naming
    # the failed share against night 1; the checks still answered and none regressed.
    assert states[1]["engines.short"] == "failed" and states[1]["compare"] == "failed", states[1]
    outcome = dirs[1].read_json("state/steps/plain-short.json")
    assert outcome["status"] == "failed" and "20 of 20 measured requests failed (100%" in outcome["detail"], outcome
    assert any("short c=2 failed_share: 0.0% -> 100.0%" in line and dirs[0].run_id in line
               for line in regressions[1]["regressions"]), regressions[1]
    checks = [r for r in dirs[1].read_rows("regressions") if r["metric"].startswith("check:")]
    assert checks and not any(r["regressed"] for r in checks)

    # Night 3: 40% failed. Still red, against night 1 (the last good run), not night 2 (which regressed).
    assert states[2]["engines.short"] == "success" and states[2]["compare"] == "failed", states[2]
    bad = [r for r in dirs[2].read_rows("regressions") if r["regressed"]]
    assert {(r["metric"], r["baseline_run_id"]) for r in bad} == {("failed_share", dirs[0].run_id)}, bad
    share = bad[0]
    assert share["value"] == pytest.approx(0.4) and share["baseline_value"] == 0.0
    assert share["ci_low"] > 0.02  # the whole interval of the difference above the threshold

    # Night 4: night 3 accepted. Compared with it (last good and reference at once), nothing regressed.
    assert str(runs[3].state).endswith("success"), states[3]
    rows = dirs[3].read_rows("regressions")
    assert rows and not any(r["regressed"] for r in rows)
    assert {r["baseline_run_id"] for r in rows} == {dirs[2].run_id}
    assert regressions[3]["accepted"] == [dirs[2].run_id]

    # The run index says which nights passed their comparison, and keeps the acceptance.
    from tasks.publish.archive import index_key
    from tasks.config import parse_run_config

    s3 = s3_server.client()
    index = [json.loads(s3.get_object(Bucket=bucket, Key=index_key(parse_run_config(
        {**_conf(bucket, "http://127.0.0.1:1"), "run_id": d.run_id})))["Body"].read()) for d in dirs]
    assert [doc["comparison"]["passed"] for doc in index] == [True, False, False, True]
    assert index[3]["comparison"]["accepted"] == [dirs[2].run_id]
