"""The openwebui step through Airflow (`dag.test()`): the real OpenWebUI in front of a simulator engine
that reasons; its verdicts in the archived checks table, summary.json and the report, and the chat
OpenWebUI stored archived beside them."""

from __future__ import annotations

import io
import json

import pandas as pd

OPENWEBUI_RUN = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
    "engines": [{"name": "sim-a", "dialect": "sglang", "launcher": "sim", "sim_profile": {"reasoning": True}}],
    "scenarios": {
        "openwebui": {"enabled": True},
        "warmup": False, "short": {"enabled": False}, "prefill": {"enabled": False},
        "decode": {"enabled": False}, "rate": {"enabled": False},
        "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
    },
    "archive": {"bucket": "dayone-e2e"},
    "request_timeout_s": 60,
}
OPENWEBUI_CHECKS = {"openwebui_model_list": "pass", "openwebui_chat": "pass", "openwebui_reasoning": "pass",
                    "openwebui_usage": "not_applicable"}


def test_openwebui_verdicts_reach_the_archive_summary_and_report(eval_dag, s3_conn, run_root):
    from dayone_airflow.glue import dayone_run_id
    from tasks.report.schema import read_summary
    from tasks.state.storage import RunDir

    run = eval_dag.test(run_conf=OPENWEBUI_RUN)
    assert str(run.state).endswith("success"), run.state
    run_dir = RunDir(dayone_run_id(run.run_id), run_root)
    summary = read_summary(run_dir.read_json("summary.json"))
    engine = summary.engines["sim-a"]
    assert any(line.startswith("OpenWebUI was the one real client") for line in summary.not_proved)
    assert {c: engine.checks.get(c) for c in OPENWEBUI_CHECKS} == OPENWEBUI_CHECKS, engine.check_evidence
    assert engine.checks["reasoning_split"] == "pass"  # the engine's own field, read by the functional check
    assert engine.steps["openwebui"].status == "ok"

    prefix = run_dir.read_json("archive.json")["prefixes"]["sim-a"]
    s3 = s3_conn.client()
    body = s3.get_object(Bucket="dayone-e2e", Key=prefix + "tables/checks.parquet")["Body"].read()
    checks = pd.read_parquet(io.BytesIO(body))
    archived = checks[checks["scenario"] == "openwebui"].set_index("check")["outcome"].to_dict()
    assert {c: archived.get(c) for c in OPENWEBUI_CHECKS} == OPENWEBUI_CHECKS
    assert archived.get("engine_restarts") == "pass"  # the step is watched for restarts like every other
    chat = json.loads(s3.get_object(Bucket="dayone-e2e", Key=prefix + "openwebui/chat.json")["Body"].read())
    answers = [m for m in chat["chat"]["history"]["messages"].values() if m["role"] == "assistant"]
    assert len(answers) == 2 and all(any(i["type"] == "reasoning" for i in m["output"]) for m in answers)
    assert run_dir.read_json("validation.json")["tables"]["checks"]["success"]
    assert b"openwebui_reasoning" in run_dir.read_bytes("report.html")
