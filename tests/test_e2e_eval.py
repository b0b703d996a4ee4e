"""dayone_eval end to end through Airflow (`dag.test()` on SQLite), archiving to a real S3 server."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest


SMALL_RUN = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
    "engines": [{"name": "sim-a", "dialect": "sglang", "launcher": "sim"}],
    "scenarios": {
        "short": {"concurrency": [1, 4], "rounds": 1, "requests_per_round": 8},
        "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
        "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
    },
    "archive": {"bucket": "dayone-e2e"},
    "request_timeout_s": 30,
}


def _read_table(s3, bucket, key):
    return pd.read_parquet(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read()))


def test_walking_skeleton_archives_every_table(eval_dag, s3_conn, run_root):
    from dayone_airflow.glue import dayone_run_id
    from tasks.state.storage import RunDir

    run = eval_dag.test(run_conf=SMALL_RUN)
    assert str(run.state).endswith("success"), run.state
    run_dir = RunDir(dayone_run_id(run.run_id), run_root)
    archived = run_dir.read_json("archive.json")
    prefix = archived["prefixes"]["sim-a"]
    assert prefix.startswith("runs/dayone-sim-model/sim-a/") and prefix.endswith(run_dir.run_id + "/")
    s3 = s3_conn.client()
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="dayone-e2e", Prefix=prefix)["Contents"]}
    for rel in ("manifest.json", "summary.json", "report.html", "validation.json", "tables/requests.csv",
                "tables/requests.parquet", "tables/rounds.parquet", "tables/checks.parquet"):
        assert prefix + rel in keys, rel
    requests = _read_table(s3, "dayone-e2e", prefix + "tables/requests.parquet")
    rounds = _read_table(s3, "dayone-e2e", prefix + "tables/rounds.parquet")
    checks = _read_table(s3, "dayone-e2e", prefix + "tables/checks.parquet")
    measured = requests[requests["scenario"] == "short"]
    measured_rounds = rounds[(rounds["scenario"] == "short") & (rounds["warmup"] != True)]  # noqa: E712
    assert len(measured_rounds) == 2 and sorted(measured_rounds["concurrency"]) == [1, 4]
    assert len(measured[measured["round"] >= 1]) >= 16  # 8 requests in each of two measured rounds
    assert (measured["status"] == "ok").all()
    assert "chat_streaming" in set(checks["check"])
    assert checks.set_index("check").loc["chat_streaming", "outcome"] == "pass"


@pytest.mark.parametrize(
    ("conf", "field"),
    [({"target": "moon"}, "target"), ({"scenarios": {"short": {"concurrency": [0]}}}, "concurrency")],
)
def test_bad_param_fails_before_any_engine_starts(eval_dag, s3_conn, run_root, conf, field):
    with pytest.raises(Exception) as info:  # noqa: PT011  (the param layer or the plan step, both name the field)
        run = eval_dag.test(run_conf=conf)
        assert str(run.state).endswith("failed")
        raise RuntimeError(_plan_failure(run_root))
    assert field in str(info.value)
    assert not list(run_root.glob("*/deployments/*.json")), "no engine may be deployed on bad input"


def _plan_failure(run_root: Path) -> str:
    import json

    docs = [json.loads(p.read_text()) for p in run_root.glob("*/state/steps/plan.json")]
    return "; ".join(d.get("detail", "") for d in docs)
