"""Published tables carry no secret, internal host or private IP, on every path that writes them.

A server written for the test (not DayOne's simulator) answers some measured requests with a 500 whose
body names an in-cluster host, a private IP and a bearer token, as a failing upstream proxy does. The
run directory keeps the error as it came (it is private to the run); requests.csv and requests.parquet
written by `dayone bench`, and the tables the pipeline archives to S3, carry it scrubbed.
"""

from __future__ import annotations

import io
import subprocess
import sys
from datetime import datetime, timezone

import pandas as pd
import pytest
from plain_pipeline import external, run_pipeline, scenarios
from plain_server import MODEL, PlainServer

OUTPUT_TOKENS = 8
IN_CLUSTER_HOST = "engine-0.engines.svc.cluster.local"
PRIVATE_IP = "10.12.3.4"
TOKEN = "hf_plantedUpstreamToken0123456789"
UPSTREAM_ERROR = (f"upstream connect error to {IN_CLUSTER_HOST}:8000 ({PRIVATE_IP}): "
                  f"Authorization: Bearer {TOKEN}")
LEAKS = (IN_CLUSTER_HOST, "svc.cluster.local", PRIVATE_IP, TOKEN)


class LeakyUpstream(PlainServer):
    """Every other measured request (the bench's output length) fails with the upstream's error text."""

    def __init__(self) -> None:
        super().__init__()
        self.measured = 0

    def error_for(self, kind, body):
        if int(body.get("max_tokens") or 0) != OUTPUT_TOKENS:
            return None  # readiness probes and the like succeed
        self.measured += 1
        return (500, UPSTREAM_ERROR) if self.measured % 2 == 0 else None


def _assert_scrubbed(requests: pd.DataFrame, where: str) -> None:
    errors = [e for e in requests["error"].tolist() if isinstance(e, str)]
    assert any("upstream connect error to <host>" in e and "(<ip>)" in e and "Bearer <redacted>" in e
               for e in errors), (where, errors)
    text = requests.to_csv(index=False)
    leaked = [s for s in LEAKS if s in text]
    assert not leaked, (where, leaked)


def test_bench_writes_error_text_scrubbed_to_csv_and_parquet(tmp_path):
    with LeakyUpstream() as server:
        proc = subprocess.run(
            [sys.executable, "-m", "tasks.cli", "bench", "--endpoint", server.url, "--dialect", "openai",
             "--model", MODEL, "--scenario", "short", "--concurrency", "2", "--rounds", "1",
             "--requests-per-round", "4", "--input-tokens", "16", "--output-tokens", str(OUTPUT_TOKENS),
             "--no-warmup", "--out", str(tmp_path / "out")],
            capture_output=True, text=True, timeout=180,
        )
    assert proc.returncode == 1, proc.stderr[-2000:]  # half the requests failed: a failed round, tables written
    out = tmp_path / "out"
    for name in ("requests.csv", "requests.parquet"):
        raw = (out / name).read_bytes()
        assert not [s for s in LEAKS if s.encode() in raw], name
    _assert_scrubbed(pd.read_csv(out / "requests.csv"), "requests.csv")
    _assert_scrubbed(pd.read_parquet(out / "requests.parquet"), "requests.parquet")
    # the run's own rows keep the error as it came: scrubbing is for what is published
    private = "\n".join(p.read_text() for p in (out / "staging").rglob("*.jsonl"))
    assert IN_CLUSTER_HOST in private


@pytest.fixture(scope="module")
def archived_requests(airflow_db, s3_server, tmp_path_factory):
    with LeakyUpstream() as server:
        run_dir = run_pipeline({
            "model": {"name": MODEL, "context_limit_tokens": 4096},
            "engines": [external("leaky", server.url)],
            "scenarios": scenarios(warmup=False, short={"input_tokens": 16, "output_tokens": OUTPUT_TOKENS,
                                                        "concurrency": [2], "rounds": 1, "requests_per_round": 4}),
            "archive": {"bucket": "leaky-tables"},
            "request_timeout_s": 30,
        }, s3_server, tmp_path_factory.mktemp("leaky-runs"), datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc))
    archived = run_dir.read_json("archive.json")
    assert archived, f"not archived; step outcomes in {run_dir.path / 'state' / 'steps'}"
    s3 = s3_server.client()
    prefix = archived["prefixes"]["leaky"]
    return {name: s3.get_object(Bucket="leaky-tables", Key=prefix + "tables/" + name)["Body"].read()
            for name in ("requests.csv", "requests.parquet")}


def test_pipeline_archives_error_text_scrubbed_in_csv_and_parquet(archived_requests):
    for name, raw in archived_requests.items():
        assert not [s for s in LEAKS if s.encode() in raw], name
    _assert_scrubbed(pd.read_csv(io.BytesIO(archived_requests["requests.csv"])), "archived requests.csv")
    _assert_scrubbed(pd.read_parquet(io.BytesIO(archived_requests["requests.parquet"])), "archived requests.parquet")
