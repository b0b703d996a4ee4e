"""The quality step through Airflow (`dag.test()`): an engine planted to answer one family wrong is named
by its accuracy per family in summary.json, with every item in the archived quality table."""

from __future__ import annotations

import io

import pandas as pd

QUALITY_RUN = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
    "engines": [{"name": "sim-a", "dialect": "sglang", "launcher": "sim",
                 "sim_profile": {"quality": {"wrong_share": {"arithmetic": 1.0}}}}],
    "scenarios": {
        "quality": {"enabled": True, "items_per_family": 4, "kv_context_tokens": [128, 1024]},
        "warmup": False, "short": {"enabled": False}, "prefill": {"enabled": False},
        "decode": {"enabled": False}, "rate": {"enabled": False},
        "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
    },
    "archive": {"bucket": "dayone-e2e"},
    "request_timeout_s": 30,
}


def test_a_planted_wrong_family_is_named_in_the_summary_and_every_item_archived(eval_dag, s3_conn, run_root):
    from dayone_airflow.glue import dayone_run_id
    from tasks.report.schema import read_summary
    from tasks.state.storage import RunDir

    run = eval_dag.test(run_conf=QUALITY_RUN)
    assert str(run.state).endswith("success"), run.state
    run_dir = RunDir(dayone_run_id(run.run_id), run_root)
    quality = read_summary(run_dir.read_json("summary.json")).engines["sim-a"].quality
    assert quality is not None
    assert [f for f, a in quality.families.items() if a.high < 1.0] == ["arithmetic"]
    assert quality.families["arithmetic"].correct == 0 and quality.families["kv_retrieval"].items == 8
    prefix = run_dir.read_json("archive.json")["prefixes"]["sim-a"]
    s3 = s3_conn.client()
    body = s3.get_object(Bucket="dayone-e2e", Key=prefix + "tables/quality.parquet")["Body"].read()
    table = pd.read_parquet(io.BytesIO(body))
    assert len(table) == 4 * 8 and set(table.loc[~table["correct"], "family"]) == {"arithmetic"}
    assert run_dir.read_json("validation.json")["tables"]["quality"]["success"]
