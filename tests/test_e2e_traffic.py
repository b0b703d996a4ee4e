"""dayone_eval end to end with the traffic scenarios (multi-turn sessions, shared prefix) on the simulator
through Airflow (`dag.test()` on SQLite): their tables validated by their suites and archived, their
figures in summary.json and the report, with both engines on the throughput-latency frontier chart."""

from __future__ import annotations

import io
import json

import pandas as pd

TRAFFIC_RUN = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
    "engines": [{"name": "sim-a", "dialect": "sglang", "launcher": "sim", "sim_profile": {"cache_block_tokens": 16}},
                {"name": "sim-b", "dialect": "vllm", "launcher": "sim", "sim_profile": {"cache_block_tokens": 16}}],
    "scenarios": {
        "functional": {"enabled": False},
        "short": {"concurrency": [1, 4], "rounds": 2, "requests_per_round": 8, "output_tokens": 16},
        "prefill": {"enabled": False}, "decode": {"enabled": False},
        "rate": {"enabled": False}, "long_context": {"enabled": False}, "boundary": {"enabled": False},
        "prefix_cache": {"enabled": False},
        "sessions": {"enabled": True, "sessions": 3, "concurrency": [2], "turns": 3, "user_tokens": 32,
                     "output_tokens": 8, "think_time_s": 0.05, "rounds": 2},
        "shared_prefix": {"enabled": True, "groups": 2, "prefix_tokens": 256, "suffix_tokens": 32,
                          "requests_per_group": 3, "output_tokens": 8, "concurrency": [1, 2], "rounds": 2},
    },
    "archive": {"bucket": "dayone-e2e"},
    "request_timeout_s": 30,
}


def _table(s3, key):
    return pd.read_parquet(io.BytesIO(s3.get_object(Bucket="dayone-e2e", Key=key)["Body"].read()))


def test_sessions_and_shared_prefix_are_measured_validated_and_archived(eval_dag, s3_conn, run_root):
    from dayone_airflow.glue import dayone_run_id
    from tasks.state.storage import RunDir

    run = eval_dag.test(run_conf=TRAFFIC_RUN)
    assert str(run.state).endswith("success"), run.state
    run_dir = RunDir(dayone_run_id(run.run_id), run_root)
    validation = run_dir.read_json("validation.json")
    assert validation["success"], validation
    assert validation["tables"]["session_turns"]["rows"] == 2 * 2 * 3 * 3  # engines x rounds x sessions x turns
    assert validation["tables"]["shared_prefix_rounds"]["rows"] == 2 * 2 * 2  # engines x levels x rounds
    prefix = run_dir.read_json("archive.json")["prefixes"]["sim-a"]
    s3 = s3_conn.client()
    turns = _table(s3, prefix + "tables/session_turns.parquet")
    assert (turns["status"] == "ok").all() and sorted(set(turns["turn"])) == [0, 1, 2]
    assert (turns[turns["turn"] == 2]["cached_tokens"] > 0).all()  # the last turn reuses the first two
    reuse = _table(s3, prefix + "tables/shared_prefix_rounds.parquet")
    assert (reuse["usage_hit_rate"] > 0).all() and (reuse["expected_reuse"] > 0).all()
    warmup = _table(s3, prefix + "tables/rounds.parquet")
    warm_keys = {(int(r.input_tokens), int(r.concurrency)) for r in warmup.itertuples() if r.warmup}
    assert {(64, 2), (128, 2), (288, 1), (288, 2)} <= warm_keys  # the traffic's own shapes, bucketed
    summary = json.loads(s3.get_object(Bucket="dayone-e2e", Key=prefix + "summary.json")["Body"].read())
    traffic = summary["engines"]["sim-a"]["traffic"]
    turn_figures = traffic["sessions"]["levels"][0]["turns"]
    assert [t["turn"] for t in turn_figures] == [0, 1, 2]
    assert turn_figures[0]["cached_share"] == 0 and turn_figures[2]["cached_share"] > 0.5
    levels = traffic["shared_prefix"]["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 2] and levels[0]["usage_hit_rate"]["median"] > 0
    assert all(lv["first_encounter"]["warmup"] for lv in levels)  # the warmup met each shape first
    report = s3.get_object(Bucket="dayone-e2e", Key=prefix + "report.html")["Body"].read().decode()
    assert "Multi-turn sessions" in report and "Shared prefix" in report
    assert "id='frontier'" in report and prefix + "charts/frontier.png" in {
        o["Key"] for o in s3.list_objects_v2(Bucket="dayone-e2e", Prefix=prefix + "charts/")["Contents"]}
    assert summary["engines"]["sim-b"]["traffic"]["sessions"]["levels"][0]["turns"][2]["cached_share"] > 0.5
