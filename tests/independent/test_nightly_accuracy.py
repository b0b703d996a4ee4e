"""The nightly compares each quality family's accuracy with the last good run (docs/PROTOCOL.md, "Answers"):
two nights against plain servers written for the test, archived to a real S3 server; a night whose server
corrupts half the arithmetic regresses on accuracy/arithmetic and on no other family."""

from __future__ import annotations

import time

import pytest
from plain_server import MODEL
from quality_server import CorruptsHalfTheArithmetic, SolvesEverything

from tasks.publish.archive import archive_run
from tasks.compare.nightly import RegressionFound, compare_run
from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.quality.items import FAMILIES
from tasks.quality.run import run_quality
from tasks.state.storage import RunDir

ENGINE = "plain"


def _night(run_root, bucket: str, run_id: str, server_cls, created_ts: float, **quality):  # noqa: ANN001
    config = parse_run_config({
        "run_id": run_id,
        "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [{"name": ENGINE, "dialect": "vllm"}],
        "archive": {"bucket": bucket},
        "scenarios": {"quality": {"enabled": True, "items_per_family": 8, "kv_context_tokens": [64], **quality},
                      "short": {"enabled": False}, "prefill": {"enabled": False}, "decode": {"enabled": False},
                      "rate": {"enabled": False}, "prefix_cache": {"enabled": False},
                      "long_context": {"enabled": False}, "boundary": {"enabled": False}},
        "request_timeout_s": 30,
    })
    run_dir = RunDir(run_id, run_root)
    run_dir.write_json("manifest.json", {"run_id": run_id, "created_ts": created_ts,
                                         "config": config.model_dump(mode="json")})
    run_dir.write_json("validation.json", {"success": True})
    with server_cls() as server:
        run_quality(EngineContext(config, endpoint_for(config, ENGINE, server.url, "sha256:" + "0" * 64), run_dir))
    return run_dir, config


@pytest.fixture()
def bucket(s3_server) -> str:
    return f"acc-{time.time_ns()}"


def test_a_family_answered_worse_than_last_night_regresses_and_no_other(s3_server, run_root, bucket):
    s3 = s3_server.client()
    night1, cfg1 = _night(run_root, bucket, "night-1", SolvesEverything, 1000.0)
    archive_run(night1, cfg1, s3)
    night2, cfg2 = _night(run_root, bucket, "night-2", CorruptsHalfTheArithmetic, 2000.0)
    with pytest.raises(RegressionFound) as found:
        compare_run(night2, cfg2, s3)
    rows = {r["metric"]: r for r in night2.read_rows("regressions", ENGINE)}
    # every family compared, read from the archive: its accuracy, and its items one by one
    assert set(rows) == {f"{kind}/{f}" for f in FAMILIES for kind in ("accuracy", "items")}, rows
    assert sorted(m for m, r in rows.items() if r["regressed"]) == ["accuracy/arithmetic", "items/arithmetic"]
    drop = rows["accuracy/arithmetic"]
    assert (drop["baseline_value"], drop["value"], drop["change"]) == (1.0, 0.5, -0.5)
    assert drop["ci_high"] < 0 and drop["ci_low"] < drop["change"] and drop["baseline_run_id"] == "night-1"
    assert drop["threshold"] == -cfg2.thresholds.accuracy_drop and drop["verdict"].startswith("lower (8/8 then, 4/8 now)")
    assert "plain/quality accuracy/arithmetic: 100% -> 50% of items answered right" in str(found.value)
    assert night2.frame("regressions").shape[0] == len(rows)  # the rows fit the table schema


def test_the_same_answers_again_pass_and_another_task_set_is_not_compared(s3_server, run_root, bucket):
    s3 = s3_server.client()
    night1, cfg1 = _night(run_root, bucket, "night-1", SolvesEverything, 1000.0)
    archive_run(night1, cfg1, s3)
    night2, cfg2 = _night(run_root, bucket, "night-2", SolvesEverything, 2000.0)
    compare_run(night2, cfg2, s3)
    rows = night2.read_rows("regressions", ENGINE)
    assert len(rows) == 2 * len(FAMILIES) and not any(r["regressed"] for r in rows)
    assert {r["verdict"] for r in rows if r["metric"].startswith("accuracy/")} == {
        "no detectable difference (8/8 then, 8/8 now)"}
    # another seed sends other items: its accuracies are not last night's to compare with
    night3, cfg3 = _night(run_root, bucket, "night-3", CorruptsHalfTheArithmetic, 3000.0, seed=7)
    result = compare_run(night3, cfg3, s3)
    assert result["engines"][ENGINE]["compared"] == 0


def test_an_nll_rise_against_last_night_regresses_at_each_length_and_the_same_nll_passes(s3_server, run_root, bucket):
    from loglik_server import OffsetsLogprobs, ScoresPrompts

    from tasks.quality.loglik import run_loglik

    def night(run_id: str, server_cls, created_ts: float):  # noqa: ANN001, ANN202
        run_dir, config = _night(run_root, bucket, run_id, SolvesEverything, created_ts,
                                 nll_lengths_tokens=[64, 256])
        with server_cls() as server:
            run_loglik(EngineContext(config, endpoint_for(config, ENGINE, server.url, "sha256:" + "0" * 64), run_dir))
        return run_dir, config

    s3 = s3_server.client()
    night1, cfg1 = night("night-1", ScoresPrompts, 1000.0)
    archive_run(night1, cfg1, s3)
    night2, cfg2 = night("night-2", ScoresPrompts, 2000.0)
    compare_run(night2, cfg2, s3)
    same = {r["metric"]: r for r in night2.read_rows("regressions", ENGINE) if r["metric"].startswith("nll/")}
    assert set(same) == {"nll/64", "nll/256"} and not any(r["regressed"] for r in same.values())
    archive_run(night2, cfg2, s3)
    night3, cfg3 = night("night-3", OffsetsLogprobs, 3000.0)
    with pytest.raises(RegressionFound) as found:
        compare_run(night3, cfg3, s3)
    rows = [r for r in night3.read_rows("regressions", ENGINE) if r["metric"].startswith("nll/")]
    assert {r["metric"] for r in rows if r["regressed"]} == {"nll/64", "nll/256"}
    assert all(r["change"] == pytest.approx(OffsetsLogprobs.offset_nats) for r in rows if r["regressed"])
    assert "plain/quality nll/256:" in str(found.value) and "nats/token of the fixed text (+0.300" in str(found.value)
    assert not any(r["regressed"] for r in night3.read_rows("regressions", ENGINE) if r["metric"].startswith("accuracy/"))
