"""Answer and log-likelihood parity through Airflow (`dag.test()`): of three simulated engines serving the
same weights, one is planted to answer arithmetic wrong and one to give every prompt token a lower
log-probability; summary.json, the decision and report.html name exactly those two, and the loglik
table is archived and validated."""

from __future__ import annotations

import io

import pandas as pd

OFFSET_NATS = 0.3
PARITY_RUN = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
    "engines": [
        {"name": "sim-sound", "dialect": "sglang", "launcher": "sim"},
        {"name": "sim-wrong", "dialect": "vllm", "launcher": "sim",
         "sim_profile": {"quality": {"wrong_share": {"arithmetic": 1.0}}}},
        {"name": "sim-offset", "dialect": "sglang", "launcher": "sim",
         "sim_profile": {"quality": {"nll_offset_nats": OFFSET_NATS}}},
    ],
    "scenarios": {
        "quality": {"enabled": True, "items_per_family": 4, "kv_context_tokens": [128],
                    "nll_lengths_tokens": [128, 1024]},
        "warmup": False, "short": {"enabled": False}, "prefill": {"enabled": False},
        "decode": {"enabled": False}, "rate": {"enabled": False},
        "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
    },
    "archive": {"bucket": "dayone-e2e"},
    "request_timeout_s": 30,
}


def test_the_engine_with_wrong_answers_and_the_one_with_an_nll_offset_are_named(eval_dag, s3_conn, run_root):
    from dayone_airflow.glue import dayone_run_id
    from tasks.report.schema import read_summary
    from tasks.state.storage import RunDir

    run = eval_dag.test(run_conf=PARITY_RUN)
    assert str(run.state).endswith("success"), run.state
    run_dir = RunDir(dayone_run_id(run.run_id), run_root)
    summary = read_summary(run_dir.read_json("summary.json"))
    differ = {(p.a, p.b, p.family, p.worse) for p in summary.parity.answers if p.worse}
    assert differ == {("sim-sound", "sim-wrong", "arithmetic", "sim-wrong"),
                      ("sim-wrong", "sim-offset", "arithmetic", "sim-wrong")}, differ
    assert {f.engine for f in summary.parity.nll_findings} == {"sim-offset"}
    assert {(f.kind, f.length_tokens) for f in summary.parity.nll_findings} == {("gap", 128), ("gap", 1024)}
    leads = [d.text for d in summary.decision if d.topic == "leads"]
    assert leads[0].startswith("Answers differ: sim-wrong answered worse in arithmetic"), leads
    page = run_dir.read_bytes("report.html").decode()
    assert "Answers differ: sim-wrong answered worse in arithmetic" in page
    assert "<span class='badge fail'>NLL gap</span> sim-offset&#39;s NLL at 1,024 tokens" in page
    prefix = run_dir.read_json("archive.json")["prefixes"]["sim-offset"]
    body = s3_conn.client().get_object(Bucket="dayone-e2e", Key=prefix + "tables/loglik.parquet")["Body"].read()
    table = pd.read_parquet(io.BytesIO(body))
    assert sorted(table["length_tokens"]) == [128, 1024] and (table["status"] == "ok").all()
    assert run_dir.read_json("validation.json")["tables"]["loglik"]["success"]
