"""dayone_nightly end to end (`dag.test()` per logical date, simulator engines, real S3 server).

Night 1 pins and records its digest and becomes the baseline; night 2, unchanged, compares clean;
night 3 runs a planted regression (a simulator six times slower per token, slower first token): its
`compare` task fails, the run fails, and the `regressions` table is archived with the regressed rows.
A regression is decided by the interval of the round values' ratio (tasks/compare/nightly.py), which absorbs
jitter between rounds; thresholds are still loosened to -50% / +100% because the shared test machine's
load can shift a whole run by more than the production defaults (-10% / +20%), which no interval
tells from a real change; the planted regression is far beyond either.
"""

from __future__ import annotations

import datetime as dt
import io
import time

import pandas as pd
from product_fixtures import small_config

NIGHTS = [dt.datetime(2026, 11, d, 3, tzinfo=dt.timezone.utc) for d in (24, 25, 26)]
SLOW = {"itl_s": 0.03, "ttft_base_s": 0.3}


def _conf(bucket: str, profile: dict | None = None) -> dict:
    engine = {"name": "sim-a", "dialect": "sglang", "launcher": "sim", "sim_profile": profile or {}}
    conf = small_config(bucket, [engine], thresholds={"output_tps_drop": 0.5, "ttft_p95_rise": 1.0})
    # warmed, as a nightly runs: the nightly compares steady rounds only, so both measured rounds count
    conf["scenarios"]["warmup"] = True
    return conf


def _task_states(run) -> dict[str, str]:
    return {ti.task_id: str(ti.state).rsplit(".", 1)[-1].lower() for ti in run.get_task_instances() if ti.map_index <= 0}


def test_nightly_records_digests_compares_and_fails_on_a_planted_regression(dagbag, s3_conn, run_root):
    from dayone_airflow.glue import dayone_run_id
    from tasks.publish.catalog import read_entry
    from tasks.config import parse_run_config
    from tasks.state.storage import RunDir

    bucket = f"nightly-{time.time_ns()}"
    nightly = dagbag.get_dag("dayone_nightly")
    s3 = s3_conn.client()
    runs = []
    for night, profile in zip(NIGHTS, (None, None, SLOW)):
        runs.append(nightly.test(logical_date=night, run_conf=_conf(bucket, profile)))
    dirs = [RunDir(dayone_run_id(r.run_id), run_root) for r in runs]

    # Nights 1 and 2 succeed; night 2 compared against night 1 and found nothing.
    for run in runs[:2]:
        assert str(run.state).endswith("success"), (run.state, _task_states(run))
    first_rows = dirs[0].read_rows("regressions")
    assert first_rows == []  # no earlier good run: nothing to compare
    clean = dirs[1].read_rows("regressions")
    assert clean and not any(r["regressed"] for r in clean)
    assert {r["baseline_run_id"] for r in clean} == {dirs[0].run_id}
    # 2 rounds a side: every headline row carries the ratio of its round values, its interval and verdict
    headline = [r for r in clean if r["metric"] in ("output_tps", "ttft_p95_s")]
    assert {r["metric"] for r in headline} == {"output_tps", "ttft_p95_s"}, clean
    assert all(r["ci_low"] <= r["ratio"] <= r["ci_high"] and r["verdict"] for r in headline), headline

    # Night 3 regressed: compare failed (Airflow's alerting applies), the run failed, the rest still ran.
    states = _task_states(runs[2])
    assert str(runs[2].state).endswith("failed")
    assert states["compare"] == "failed"
    assert states["validate"] == "success" and states["archive"] == "success"
    bad = [r for r in dirs[2].read_rows("regressions") if r["regressed"]]
    assert {r["metric"] for r in bad} >= {"output_tps"}, bad
    tps = next(r for r in bad if r["metric"] == "output_tps")
    assert tps["verdict"] == "lower" and tps["ci_high"] < 1 - 0.5, tps  # the whole interval below the threshold
    # against the last good run, and against the lineage's first run (the reference) as well
    assert {r["baseline_run_id"] for r in bad if r["baseline_kind"] == "last_good"} == {dirs[1].run_id}
    assert {r["baseline_run_id"] for r in bad if r["baseline_kind"] == "reference"} == {dirs[0].run_id}

    # The regressions table is archived with the run; the catalog holds each night's digest.
    prefix = dirs[2].read_json("archive.json")["prefixes"]["sim-a"]
    body = s3.get_object(Bucket=bucket, Key=prefix + "tables/regressions.parquet")["Body"].read()
    archived = pd.read_parquet(io.BytesIO(body))
    assert archived["regressed"].any() and set(archived["metric"]) >= {"output_tps"}
    cfg = parse_run_config(_conf(bucket))
    digests = [read_entry(s3, cfg, night)["engines"]["sim-a"]["image_digest"] for night in NIGHTS]
    assert digests[0] == digests[1] != digests[2]  # the slower simulator is another identity
    assert digests[2] == dirs[2].read_json("pinned.json")["sim-a"]["image_digest"]


    # Each archive emitted an event on the dayone_archived_run Asset naming its run and prefixes.
    extras = _asset_event_extras()
    for run_dir in dirs:
        mine = [x for x in extras if x.get("run_id") == run_dir.run_id]
        assert mine and mine[0]["bucket"] == bucket and "sim-a" in mine[0]["prefixes"], (run_dir.run_id, extras)


def _asset_event_extras() -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from dayone_airflow.assets import ARCHIVED_RUN

    with create_session() as session:
        events = session.scalars(
            select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == ARCHIVED_RUN.name)).all()
        return [dict(e.extra or {}) for e in events]
