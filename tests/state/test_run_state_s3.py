"""Run state in S3: documents, listings and partitions through RunDir, against a real S3 server.

S3 has no append: a try writes its rows as chunks under a try prefix of its own and points the
partition at it; readers read the try pointed at; a retry replaces the partition whole, also
when a killed or still-running (zombie) try leaves chunks behind.
"""

from __future__ import annotations

import time

import pytest

from tasks.state import partitions
from tasks.state.partitions import ChunkSink
from tasks.state.storage import NoLocalPath, RunDir
from tasks.state.object_store import parse_staging
from tasks.config import ConfigError


def _wait_for(predicate, timeout_s: float = 10.0, every_s: float = 0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    return predicate()


def test_documents_round_trip_and_nothing_lands_on_local_disk(staging, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "work"))
    rd = RunDir("run-docs", staging)
    assert rd.read_json("manifest.json") is None and rd.read_json("pinned.json", {}) == {}
    rd.write_json("manifest.json", {"run_id": "run-docs"})
    rd.write_json("state/steps/plan.json", {"step": "plan", "status": "ok"})
    rd.write_json("state/steps/sim-deploy.json", {"step": "deploy", "status": "ok"})
    rd.write_bytes("report.html", b"<html></html>")
    again = RunDir("run-docs", staging)  # another worker: a new store, the same prefix
    assert again.read_json("manifest.json") == {"run_id": "run-docs"}
    assert again.names("state/steps") == ["plan.json", "sim-deploy.json"]
    assert again.read_bytes("report.html") == b"<html></html>"
    assert again.where("report.html") == f"s3://{staging.bucket}/{staging.prefix}/run-docs/report.html"
    with pytest.raises(NoLocalPath, match="s3://"):
        _ = again.path
    assert not (tmp_path / "work").exists()


def test_outcomes_and_verdict_read_from_s3(staging):
    from tasks.state.documents import StepOutcome, outcomes, write_outcome
    from tasks.steps.execution import verdict

    rd = RunDir("run-outcomes", staging)
    write_outcome(rd, StepOutcome(step="plan", status="ok"))
    write_outcome(rd, StepOutcome(step="short", engine="sim", status="failed", detail="boom"))
    rd.write_json("validation.json", {"success": True})
    assert [(o.where, o.status) for o in outcomes(RunDir("run-outcomes", staging))] == [
        ("run/plan", "ok"), ("sim/short", "failed")]
    assert verdict(RunDir("run-outcomes", staging), ("plan", "pin")) == [
        "sim/short: boom", "run/pin: never ran (a step before it failed)"]


def test_a_chunk_is_stored_at_max_rows_or_max_age_whichever_first(staging):
    store = staging.child("sink")
    sink = ChunkSink(store, "p/", max_rows=10, max_age_s=0.3)
    # the store's S3 client made first: its start (about a second on a slow host) would age the held rows
    # before the two full chunks were stored, and this times the sink, not the client
    assert store.keys("p/") == []
    started = time.monotonic()
    sink.add([f'{{"n": {i}}}\n' for i in range(25)])
    assert store.keys("p/") == ["p/000001.jsonl", "p/000002.jsonl"]  # two full chunks at once, 5 held
    stored = _wait_for(lambda: len(store.keys("p/")) == 3)
    age_s = time.monotonic() - started
    assert stored, "the held rows were never stored"
    assert 0.3 <= age_s < 2.0, f"stored after {age_s:.2f} s, not at the 0.3 s age"
    sink.add(['{"n": 25}\n'])
    sink.close()  # the last row goes at close, not a second later
    assert [store.get(k).count(b"\n") for k in store.keys("p/")] == [10, 10, 5, 1]
    print(f"age-triggered chunk stored {age_s:.3f} s after its first row (max_age_s 0.3)")


def test_rows_in_order_across_writers_of_one_try(staging):
    rd = RunDir("run-rows", staging)
    with rd.rows("requests", "e", "short") as out:
        out.write({"request_id": "before"})
        with out.off_loop(flush_every_s=0.05) as queued:
            queued.write({"request_id": "q0"})
            # the writer process stores it with its chunk: within CHUNK_EVERY_S, before the block ends
            seen = _wait_for(lambda: any(r["request_id"] == "q0" for r in rd.read_rows("requests", "e")),
                             timeout_s=partitions.CHUNK_EVERY_S + 5)
            assert seen, "a queued row was not stored while the block ran"
            for i in range(1, 600):
                queued.write({"request_id": f"q{i}"})
        out.write({"request_id": "after"})
    assert out.count == 602
    ids = [r["request_id"] for r in RunDir("run-rows", staging).read_rows("requests")]
    assert ids == ["before"] + [f"q{i}" for i in range(600)] + ["after"]


def test_a_retry_replaces_the_partition_whole_even_with_a_zombie_try_still_writing(staging):
    rd = RunDir("run-retry", staging)
    base = "tables/checks/e/functional/"
    zombie_cm = rd.rows("checks", "e", "functional")
    zombie = zombie_cm.__enter__()  # a try that was never closed: a killed worker, or one cut off
    for i in range(300):
        zombie.write({"check": f"old-{i}"})  # one chunk of 256 stored, 44 held by its timer
    old_keys = [k for k in rd.store.keys(base) if k.endswith(".jsonl")]
    assert len(old_keys) == 1 and len(rd.read_rows("checks")) == 256

    with rd.rows("checks", "e", "functional") as retry:  # the retry
        retry.write({"check": "new"})
    time.sleep(partitions.CHUNK_EVERY_S + 0.5)  # the zombie's timer stores its 44 held rows now
    assert [r["check"] for r in rd.read_rows("checks")] == ["new"]
    assert [r["check"] for r in rd.read_rows("checks", "e")] == ["new"]
    keys = rd.store.keys(base)
    assert not set(old_keys) & set(keys), "the earlier try's chunks were kept"
    zombie_left = [k for k in keys if k.endswith(".jsonl") and not k.startswith(base + retry._partition.token)]
    assert len(zombie_left) == 1  # stored after the retry opened: ignored by readers

    with rd.rows("checks", "e", "functional") as third:  # the next try clears what the zombie left
        third.write({"check": "third"})
    assert [r["check"] for r in rd.read_rows("checks")] == ["third"]
    assert not set(zombie_left) & set(rd.store.keys(base))
    zombie._sink.close()  # end its timer thread


def test_partitions_read_in_the_order_the_local_files_sort(staging, tmp_path):
    for root in (staging, tmp_path):
        rd = RunDir("run-order", root)
        for engine, partition in (("b", "short"), ("a", "short-x"), ("a", "short")):
            with rd.rows("rounds", engine, partition) as out:
                out.write({"where": f"{engine}/{partition}"})
    local = [r["where"] for r in RunDir("run-order", tmp_path).read_rows("rounds")]
    assert [r["where"] for r in RunDir("run-order", staging).read_rows("rounds")] == local
    assert local == ["a/short-x", "a/short", "b/short"]


@pytest.mark.parametrize("value", ["dayone/staging", "s3://", "file:///tmp/x"])
def test_a_staging_value_that_is_no_s3_prefix_names_the_fix(value):
    with pytest.raises(ConfigError, match="DAYONE_STAGING: .* Fix: set it to s3://BUCKET/PREFIX"):
        parse_staging(value)


def test_staging_prefix_parses():
    assert parse_staging("s3://dayone/staging/") == ("dayone", "staging")
    assert parse_staging("s3://dayone") == ("dayone", "")
