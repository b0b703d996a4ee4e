"""The trace scenario through Airflow (`dag.test()` on SQLite) on the simulator: the synthetic trace checked at
plan, replayed, its rows validated (Great Expectations) and archived, its section in summary.json and the report."""

from __future__ import annotations

import io
import json

import pandas as pd

TRACE_RUN = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
    "engines": [{"name": "sim-a", "dialect": "vllm", "launcher": "sim"},
                {"name": "sim-b", "dialect": "sglang", "launcher": "sim"}],
    "scenarios": {
        "functional": {"enabled": False}, "warmup": False,
        "short": {"enabled": False}, "prefill": {"enabled": False}, "decode": {"enabled": False},
        "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
        "trace": {"enabled": True, "rounds": 3,
                  "synthetic": {"seed": 9, "requests": 30, "rate_rps": 30.0, "max_input_tokens": 2048,
                                "max_output_tokens": 8}},
    },
    "archive": {"bucket": "dayone-e2e"},
    "request_timeout_s": 30,
}


def test_a_trace_run_is_replayed_validated_and_archived(eval_dag, s3_conn, run_root):
    from dayone_airflow.glue import dayone_run_id
    from tasks.state.storage import RunDir

    run = eval_dag.test(run_conf=TRACE_RUN)
    assert str(run.state).endswith("success"), run.state
    run_dir = RunDir(dayone_run_id(run.run_id), run_root)
    assert run_dir.read_json("manifest.json")["trace"]["rows"] == 30
    validation = run_dir.read_json("validation.json")
    assert validation["success"] and validation["tables"]["trace_requests"]["success"]
    assert validation["tables"]["trace_requests"]["rows"] == 180  # two engines, three rounds of 30
    prefix = run_dir.read_json("archive.json")["prefixes"]["sim-a"]
    s3 = s3_conn.client()
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="dayone-e2e", Prefix=prefix)["Contents"]}
    assert prefix + "tables/trace_requests.parquet" in keys and prefix + "tables/trace_requests.csv" in keys
    body = s3.get_object(Bucket="dayone-e2e", Key=prefix + "tables/trace_requests.parquet")["Body"].read()
    rows = pd.read_parquet(io.BytesIO(body))
    assert len(rows) == 90 and (rows["status"] == "ok").all() and set(rows["round"]) == {1, 2, 3}
    assert rows["lateness_s"].notna().all() and (rows["concurrency"].isna()).all()
    rounds = pd.read_parquet(io.BytesIO(s3.get_object(Bucket="dayone-e2e", Key=prefix + "tables/rounds.parquet")
                                        ["Body"].read()))
    traced = rounds[rounds["scenario"] == "trace"]
    assert len(traced) == 3 and traced["rate_rps"].notna().all() and (traced["requests_ok"] == 30).all()
    summary = json.loads(s3.get_object(Bucket="dayone-e2e", Key=prefix + "summary.json")["Body"].read())
    trace = summary["engines"]["sim-a"]["trace"]
    assert [r["round"] for r in trace["rounds"]] == [1, 2, 3]
    # Sent by client processes of their own (load.client_processes), each a client_shards row of its round.
    assert trace["client_processes"] >= 1 and all(r["client_processes"] >= 1 for r in trace["rounds"])
    shards = pd.read_parquet(io.BytesIO(s3.get_object(Bucket="dayone-e2e", Key=prefix + "tables/client_shards.parquet")
                                        ["Body"].read()))
    traced_shards = shards[shards["scenario"] == "trace"]
    assert sorted(set(traced_shards["round"])) == [1, 2, 3]
    assert traced_shards.groupby("round")["requests"].sum().eq(30).all(), traced_shards
    assert all(r["server_hit_rate"] is not None and r["expected_reuse"] > 0 for r in trace["rounds"])
    # The engines compared on the trace as on any performance level: the same window, so the same level; the
    # first round (a first encounter) left out of the steady rounds; two steady rounds a side give an interval.
    (tps,) = [c for c in summary["comparisons"] if (c["scenario"], c["figure"]) == ("trace", "output_tps")]
    assert tps["engine"] == "sim-b" and tps["base"] == "sim-a" and tps["level"] == trace["level"]["label"]
    assert tps["ratio"] is not None and tps["verdict"] != "not enough rounds"
    report = s3.get_object(Bucket="dayone-e2e", Key=prefix + "report.html")["Body"].read().decode()
    assert "Trace replay" in report and "server hit rate" in report and "trace" in report
