"""dayone_eval (`dag.test()`) with your own prompts from the run's S3 store against a server that records what
it received: the plan reads the object through the dayone_s3 connection, the dataset step sends every row in
each round, the tables validate, and the summary and report show the dataset's levels."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from plain_pipeline import external, run_pipeline, scenarios
from plain_server import MODEL
from recording_server import RecordingServer

BUCKET = "dataset-pipeline"
ROWS = [{"prompt": f"Question {i}: what is {i} plus {i}?"} for i in range(3)] + [
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Name {i} colours."}],
     "max_tokens": 5} for i in range(3)]


def test_a_dataset_in_s3_runs_through_the_pipeline(airflow_db, s3_server, tmp_path):
    s3 = s3_server.client()
    try:
        s3.create_bucket(Bucket=BUCKET)
    except Exception:  # noqa: BLE001  (made by an earlier test of the session)
        pass
    s3.put_object(Bucket=BUCKET, Key="data/prompts.jsonl", Body="".join(json.dumps(r) + "\n" for r in ROWS).encode())
    with RecordingServer() as server:
        run_dir = run_pipeline({
            "model": {"name": MODEL, "context_limit_tokens": 4096},
            "engines": [external("plain", server.url)],
            "scenarios": {**scenarios(dataset={"enabled": True, "s3_key": "data/prompts.jsonl", "max_tokens": 4,
                                               "concurrency": [2], "rounds": 2}), "warmup": False},
            "archive": {"bucket": BUCKET},
            "request_timeout_s": 30,
        }, s3_server, tmp_path, datetime(2026, 12, 1, 5, 0, tzinfo=timezone.utc))
    summary = run_dir.read_json("summary.json")
    assert summary is not None, f"no summary.json; step outcomes in {run_dir.path / 'state' / 'steps'}"
    recorded = run_dir.read_json("manifest.json")["dataset"]
    assert {k: v for k, v in recorded.items() if k != "content_sha256"} == {"source": "s3 key data/prompts.jsonl",
                                                                            "rows": 6, "chat_rows": 3}
    assert len(recorded["content_sha256"]) == 64
    sent = [(r["prompt"], r["messages"]) for r in server.received]  # the readiness probe's request too
    assert all(sent.count((r.get("prompt"), r.get("messages"))) == 2 for r in ROWS), sent
    assert run_dir.read_json("validation.json")["success"]
    level = summary["engines"]["plain"]["traffic"]["dataset"]["levels"][0]
    assert (level["concurrency"], level["rows"], level["rounds"]) == (2, 6, 2)
    assert "Your own prompts" in (run_dir.path / "report.html").read_text(encoding="utf-8")
