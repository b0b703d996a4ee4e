"""Effect verdicts against servers written for the test (not DayOne's simulator).

Two plain servers that differ in one known behaviour, the delay between output tokens (4 ms against
2 ms), are evaluated by the pipeline (`dag.test()`, real SeaweedFS). The faster one's output
throughput must be called better than the base's with an interval that excludes 1, in summary.json,
in the decision summary and in report.html: the paths that publish a comparison.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from plain_server import MODEL, PlainServer

OUTPUT_TOKENS = 24


class BaseServer(PlainServer):
    token_delay_s = 0.004


class FasterServer(PlainServer):
    token_delay_s = 0.002  # the one behaviour that differs: half the gap between tokens


@pytest.fixture(scope="module")
def two_engine_run(airflow_db, s3_server, tmp_path_factory):
    from airflow.dag_processing.dagbag import DagBag

    from dayone_airflow.glue import dayone_run_id
    from tasks.staging import RunDir

    repo = Path(__file__).resolve().parents[2]
    dag = DagBag(dag_folder=str(repo / "dags")).get_dag("dayone_eval")
    root = tmp_path_factory.mktemp("effect-runs")
    when = datetime(2026, 11, 30, 11, 0, tzinfo=timezone.utc)
    with BaseServer() as base, FasterServer() as faster, pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAYONE_WORKDIR", str(root))
        mp.setenv("AIRFLOW_CONN_DAYONE_S3", s3_server.connection_uri())
        conf = {
            "model": {"name": MODEL, "context_limit_tokens": 4096},
            "engines": [  # the first engine is the base every other one is compared with
                {"name": "base", "dialect": "openai", "launcher": "external", "endpoint": base.url},
                {"name": "faster", "dialect": "openai", "launcher": "external", "endpoint": faster.url},
            ],
            "scenarios": {
                "functional": {"enabled": False},
                "short": {"input_tokens": 16, "output_tokens": OUTPUT_TOKENS, "concurrency": [2], "rounds": 4,
                          "requests_per_round": 8},
                "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
                "long_context": {"enabled": False}, "boundary": {"enabled": False},
                "prefix_cache": {"enabled": False},
            },
            "archive": {"bucket": "effects"},
            "request_timeout_s": 30,
        }
        run = dag.test(run_conf=conf, logical_date=when, run_after=when)
    run_dir = RunDir(dayone_run_id(run.run_id), root)
    summary = run_dir.read_json("summary.json")
    assert summary is not None, f"no summary.json; step outcomes in {run_dir.path / 'state' / 'steps'}"
    return summary, (run_dir.path / "report.html").read_text(encoding="utf-8")


def test_halving_the_token_gap_is_called_better_with_an_interval_that_excludes_1(two_engine_run):
    summary, html = two_engine_run
    [c] = [c for c in summary["comparisons"]
           if (c["scenario"], c["figure"], c["base"], c["engine"]) == ("short", "output_tps", "base", "faster")]
    # 24 tokens: about 10 + 23 x 4 ms against 10 + 23 x 2 ms a request, so roughly 1.8x the throughput
    assert c["verdict"] == "better", c
    assert 1 < c["low"] <= c["ratio"] <= c["high"] and c["ratio"] > 1.3, c
    lead = [d["text"] for d in summary["decision"] if d["text"].startswith("short output throughput, faster vs base")]
    assert lead and "better" in lead[0] and "leads" not in lead[0], lead
    effects = html[html.index("id='effects'"):]
    assert "faster vs base" in effects and "better" in effects
