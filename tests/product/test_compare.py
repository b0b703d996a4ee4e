"""Regression comparison against the last good run, with real archives in a real S3 server."""

from __future__ import annotations

import time
from typing import Any

import pytest
from product_fixtures import check_row, needle_row, round_row, small_config

from tasks.archive import archive_run
from tasks.compare import RegressionFound, compare_run
from tasks.config import parse_run_config
from tasks.staging import RunDir

ENGINE = "sim-a"


def _run(run_root, bucket: str, run_id: str, tps: float, ttft: float, checks: dict[str, str],
         needle_ok: bool, cache: str, created_ts: float, valid: bool = True, **conf: Any) -> tuple[RunDir, Any]:
    cfg = parse_run_config({**small_config(bucket), "run_id": run_id, **conf})
    run_dir = RunDir(run_id, run_root)
    # As the plan step writes it: the run config is what a later run's baseline matching reads.
    run_dir.write_json("manifest.json", {"run_id": run_id, "created_ts": created_ts,
                                         "config": cfg.model_dump(mode="json")})
    run_dir.write_json("pinned.json", {ENGINE: {"image_digest": "sha256:" + "a" * 64}})
    run_dir.write_json("validation.json", {"success": valid})
    with run_dir.rows("rounds", ENGINE, "short") as out:
        for c in (1, 4):
            for rnd, wobble in enumerate((0.98, 1.0, 1.02), start=1):
                out.write(round_row(run_id, ENGINE, c, rnd, tps * c * wobble, ttft * wobble))
    with run_dir.rows("checks", ENGINE, "functional") as out:
        for name, outcome in checks.items():
            out.write(check_row(run_id, ENGINE, name, outcome))
    with run_dir.rows("needles", ENGINE, "long_context") as out:
        out.write(needle_row(run_id, ENGINE, 16384, 0.5, needle_ok))
    run_dir.write_json(f"verdicts/{ENGINE}/prefix_cache.json", {"verdict": cache})
    return run_dir, cfg


GOOD_CHECKS = {"output_streams": "pass", "chat": "pass", "tool_call": "pass"}


@pytest.fixture()
def bucket(s3_server) -> str:
    return f"cmp-{time.time_ns()}"


def _archive(run_dir: RunDir, cfg: Any, s3: Any) -> None:
    archive_run(run_dir, cfg, s3)
    if cfg.engines:  # the report step puts summary.json beside the tables; the cache verdict lives there
        from tasks.archive import json_bytes, put_once
        from tasks.report import build_summary

        prefix = run_dir.read_json("archive.json")["prefixes"][ENGINE]
        put_once(s3, cfg.archive.bucket, prefix + "summary.json",
                 json_bytes(build_summary(run_dir, cfg).model_dump(mode="json")), "application/json")


def test_unchanged_run_passes_with_every_comparison_recorded(s3_server, run_root, bucket):
    s3 = s3_server.client()
    base, cfg = _run(run_root, bucket, "base-1", 100.0, 0.10, GOOD_CHECKS, True, "effective", 1000.0)
    _archive(base, cfg, s3)
    now, cfg_now = _run(run_root, bucket, "now-1", 97.0, 0.11, GOOD_CHECKS, True, "effective", 2000.0)
    result = compare_run(now, cfg_now, s3)
    rows = now.read_rows("regressions", ENGINE)
    assert result["engines"][ENGINE]["baselines"]["short"] == "base-1"
    metrics = {(r["metric"], r["concurrency"]) for r in rows}
    assert {("output_tps", 1), ("output_tps", 4), ("ttft_p95_s", 1), ("ttft_p95_s", 4)} <= metrics
    assert {"check:chat", "check:tool_call", "needle:16384@0.5", "cache_verdict"} <= {r["metric"] for r in rows}
    assert not any(r["regressed"] for r in rows)
    tps1 = next(r for r in rows if r["metric"] == "output_tps" and r["concurrency"] == 1)
    assert tps1["baseline_value"] == pytest.approx(100.0) and tps1["change"] == pytest.approx(-0.03)
    assert all(r["baseline_run_id"] == "base-1" for r in rows)
    assert now.frame("regressions").shape[0] == len(rows)  # the rows fit the table schema


def test_planted_regressions_fail_compare_and_are_rows(s3_server, run_root, bucket):
    s3 = s3_server.client()
    base, cfg = _run(run_root, bucket, "base-2", 100.0, 0.10, GOOD_CHECKS, True, "effective", 1000.0)
    _archive(base, cfg, s3)
    broken = {**GOOD_CHECKS, "tool_call": "fail"}
    now, cfg_now = _run(run_root, bucket, "now-2", 85.0, 0.13, broken, False, "unconfirmed", 2000.0)
    with pytest.raises(RegressionFound) as info:
        compare_run(now, cfg_now, s3)
    regressed = {r["metric"] for r in now.read_rows("regressions", ENGINE) if r["regressed"]}
    # -15% throughput (threshold -10%), +30% P95 TTFT (threshold +20%), a check, a needle, the cache verdict
    assert regressed == {"output_tps", "ttft_p95_s", "check:tool_call", "needle:16384@0.5", "cache_verdict"}
    assert "check:chat" not in regressed
    assert "sim-a/short c=1 output_tps" in str(info.value) and "base-2" in str(info.value)


def test_thresholds_come_from_config(s3_server, run_root, bucket):
    s3 = s3_server.client()
    base, cfg = _run(run_root, bucket, "base-3", 100.0, 0.10, GOOD_CHECKS, True, "effective", 1000.0)
    _archive(base, cfg, s3)
    now, _ = _run(run_root, bucket, "now-3", 85.0, 0.13, GOOD_CHECKS, True, "effective", 2000.0)
    loose = parse_run_config({**small_config(bucket), "run_id": "now-3",
                              "thresholds": {"output_tps_drop": 0.2, "ttft_p95_rise": 0.5}})
    compare_run(now, loose, s3)  # -15% and +30% are inside the loosened thresholds
    assert not any(r["regressed"] for r in now.read_rows("regressions", ENGINE))


def test_quarantined_and_later_runs_are_never_baselines(s3_server, run_root, bucket):
    s3 = s3_server.client()
    good, cfg = _run(run_root, bucket, "good-4", 100.0, 0.10, GOOD_CHECKS, True, "effective", 1000.0)
    _archive(good, cfg, s3)
    bad, cfg_bad = _run(run_root, bucket, "quarantined-4", 10.0, 0.10, GOOD_CHECKS, True, "effective", 1500.0,
                        valid=False)
    _archive(bad, cfg_bad, s3)
    later, cfg_later = _run(run_root, bucket, "later-4", 500.0, 0.10, GOOD_CHECKS, True, "effective", 9000.0)
    _archive(later, cfg_later, s3)
    now, cfg_now = _run(run_root, bucket, "now-4", 50.0, 0.10, GOOD_CHECKS, True, "effective", 2000.0)
    with pytest.raises(RegressionFound):
        compare_run(now, cfg_now, s3)
    rows = now.read_rows("regressions", ENGINE)
    assert {r["baseline_run_id"] for r in rows} == {"good-4"}


def test_first_run_has_no_baseline_and_passes(s3_server, run_root, bucket):
    now, cfg_now = _run(run_root, bucket, "first-5", 100.0, 0.10, GOOD_CHECKS, True, "effective", 2000.0)
    result = compare_run(now, cfg_now, s3_server.client())
    assert result["engines"][ENGINE] == {"baselines": {}, "compared": 0, "regressed": 0}
    assert now.read_rows("regressions", ENGINE) == []
