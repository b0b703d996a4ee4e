"""dayone_eval (dag.test, real SeaweedFS) measures an engine that requires an API key, and no archived byte
holds the key.

KeyedServer (a server written for the test) refuses every request without `Authorization: Bearer K`, as
an engine started with `--api-key K` does, and answers one measured request with a 500 that quotes the
key as it is (no "Bearer" before it, a shape no scrubber pattern knows). The run config names only the
Airflow connection that holds the key (`api_key_connection`); readiness, the functional checks, the
warmup and the benchmark all reach the engine, and every object the run archived is read back and
searched for the key.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from keyed_server import KEY, KeyedServer
from plain_pipeline import external, run_pipeline, scenarios
from plain_server import MODEL

OUTPUT_TOKENS = 8
BUCKET = "keyed-archive"


@pytest.fixture(scope="module")
def keyed_run(airflow_db, s3_server, tmp_path_factory):
    # the 12th generation of the benchmark's length: after the warmup's 8, inside the measured round of 32
    with KeyedServer(echo_at=12, echo_tokens=OUTPUT_TOKENS) as server, pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_CONN_ENGINE_KEY", json.dumps({"conn_type": "generic", "password": KEY}))
        run_dir = run_pipeline({
            "model": {"name": MODEL},
            "engines": [{**external("keyed", server.url), "api_key_connection": "engine_key"}],
            "scenarios": scenarios(functional={"enabled": True},
                                   short={"input_tokens": 16, "output_tokens": OUTPUT_TOKENS, "concurrency": [4],
                                          "rounds": 1, "requests_per_round": 32}),
            "archive": {"bucket": BUCKET},
            "request_timeout_s": 30,
        }, s3_server, tmp_path_factory.mktemp("keyed-runs"), datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc))
        seen = {"refused": list(server.refused), "authorized": server.authorized, "echoed": server.echoed}
    s3 = s3_server.client()
    objects = {o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
               for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
               for o in page.get("Contents", [])}
    return run_dir, seen, objects


def test_every_request_to_the_engine_carried_the_key_from_its_connection(keyed_run):
    run_dir, seen, _ = keyed_run
    assert seen["refused"] == [], seen["refused"][:5]
    checks = run_dir.read_rows("checks", "keyed")
    assert any(r["outcome"] == "pass" for r in checks if r["scenario"] == "functional")
    measured = [r for r in run_dir.read_rows("requests", "keyed") if r["scenario"] == "short"]
    assert len(measured) == 32 and sum(r["status"] == "ok" for r in measured) == 31
    assert seen["echoed"] == 1  # the server did quote the key once: the archive below had it to leak


def test_no_archived_object_holds_the_key(keyed_run):
    _, _, objects = keyed_run
    assert any(k.endswith("tables/requests.csv") for k in objects), sorted(objects)[:20]
    leaked = [k for k, raw in objects.items() if KEY.encode() in raw]
    assert not leaked, leaked
    requests_csv = next(raw for k, raw in objects.items() if k.endswith("tables/requests.csv")).decode()
    assert "upstream rejected the credential <redacted>" in requests_csv
