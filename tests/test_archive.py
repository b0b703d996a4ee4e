"""The archive: PROTOCOL key layout, write-once objects, quarantine; against a real S3 server."""

from __future__ import annotations

import pytest

from tasks.publish.archive import WriteOnceError, archive_run, engine_prefix, put_once
from tasks.config import parse_run_config
from tasks.state.storage import RunDir


def _run(run_root, run_id="r1", success=True):
    cfg = parse_run_config({"run_id": run_id, "model": {"name": "org/model-x"},
                            "engines": [{"name": "eng-a", "dialect": "sglang"}],
                            "archive": {"bucket": "dayone-archive-test"}})
    rd = RunDir(run_id, run_root)
    rd.write_json("manifest.json", {"run_id": run_id, "note": "api_key=sk-abcdefghijklmnopqrstuv"})
    rd.write_json("pinned.json", {"eng-a": {"image_digest": "sha256:" + "ab" * 32}})
    rd.write_json("validation.json", {"success": success})
    with rd.rows("checks", "eng-a", "functional") as out:
        out.write({"run_id": run_id, "engine": "eng-a", "image_digest": "sha256:" + "ab" * 32,
                   "scenario": "functional", "round": 0, "check": "chat", "outcome": "pass", "evidence": "{}"})
    return cfg, rd


def test_layout_and_rows_read_back(run_root, s3_server):
    import io

    import pandas as pd

    cfg, rd = _run(run_root)
    s3 = s3_server.client()
    result = archive_run(rd, cfg, s3)
    prefix = "runs/org--model-x/eng-a/abababababab/r1/"
    assert result["prefixes"] == {"eng-a": prefix} and not result["quarantined"]
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="dayone-archive-test", Prefix=prefix)["Contents"]}
    assert {prefix + "manifest.json", prefix + "tables/checks.csv", prefix + "tables/checks.parquet",
            prefix + "tables/requests.parquet", prefix + "validation.json"} <= keys
    body = s3.get_object(Bucket="dayone-archive-test", Key=prefix + "tables/checks.parquet")["Body"].read()
    assert len(pd.read_parquet(io.BytesIO(body))) == 1
    manifest = s3.get_object(Bucket="dayone-archive-test", Key=prefix + "manifest.json")["Body"].read().decode()
    assert "sk-abcdefghijklmnopqrstuv" not in manifest


def test_retry_writes_identical_bytes_and_succeeds(run_root, s3_server):
    cfg, rd = _run(run_root, "r2")
    s3 = s3_server.client()
    first = archive_run(rd, cfg, s3)
    again = archive_run(rd, cfg, s3)
    assert first["keys"] == again["keys"]


def test_existing_object_is_never_overwritten(s3_server):
    s3 = s3_server.client()
    s3.create_bucket(Bucket="dayone-write-once")
    assert put_once(s3, "dayone-write-once", "k.json", b"one") is True
    assert put_once(s3, "dayone-write-once", "k.json", b"one") is False
    with pytest.raises(WriteOnceError):
        put_once(s3, "dayone-write-once", "k.json", b"two")
    assert s3.get_object(Bucket="dayone-write-once", Key="k.json")["Body"].read() == b"one"


def test_failed_validation_goes_to_quarantine(run_root, s3_server):
    cfg, rd = _run(run_root, "r3", success=False)
    result = archive_run(rd, cfg, s3_server.client())
    assert result["quarantined"]
    assert result["prefixes"]["eng-a"].startswith("quarantine/runs/")
    assert engine_prefix(cfg, "eng-a", "sha256:" + "ab" * 32, True) == result["prefixes"]["eng-a"]
