"""Backfill over older digests: each logical date runs the digests the catalog recorded for it.

Driven with `dag.test(logical_date=...)` once per date on dayone_nightly, running plan, pin and the
deploy (a Kubernetes dry run: it renders the engine's Deployment into the run directory and applies
nothing) and marking the later tasks successful unrun, so the test reads the image each date deploys. `airflow backfill create` makes the
same runs through the scheduler (docs/backfill.md).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time

import pytest
import yaml

IMAGE = "registry.dayone.test/lmsysorg/sglang:nightly"
# Everything after the deploy is marked success without running: this test is about what gets deployed.
AFTER_DEPLOY = r"^(engines\.(?!deploy$).*|compare|validate|archive|report|conclude)$"
DATES = [dt.datetime(2026, 11, d, tzinfo=dt.timezone.utc) for d in (20, 21, 22)]


def _digest(label: str) -> str:
    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


def _conf(bucket: str) -> dict:
    return {
        "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
        "engines": [{"name": "sglang", "dialect": "sglang", "image": IMAGE, "gpus": 1, "node": "gpu-1"}],
        "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False}},
        "target": "kubernetes",
        "dry_run": True,
        "archive": {"bucket": bucket},
    }


@pytest.fixture()
def bucket(s3_conn) -> str:
    return f"backfill-{time.time_ns()}"


def _seed_catalog(s3, bucket: str) -> dict[dt.datetime, str]:
    """What three earlier nightly runs recorded: a different digest each night."""
    from tasks.publish.catalog import record
    from tasks.config import parse_run_config

    cfg = parse_run_config(_conf(bucket))
    seeded = {}
    for date in DATES:
        digest = _digest(f"sglang nightly {date:%Y-%m-%d}")
        record(s3, cfg, date, {"sglang": {"image": IMAGE, "image_digest": digest, "platform_digest": digest}},
               run_id=f"scheduled__{date:%Y-%m-%d}")
        seeded[date] = digest
    return seeded


def test_backfill_over_three_dates_uses_each_dates_catalog_digest(dagbag, s3_conn, run_root, bucket):
    from dayone_airflow.glue import dayone_run_id
    from tasks.state.storage import RunDir

    s3 = s3_conn.client()
    seeded = _seed_catalog(s3, bucket)
    assert len(set(seeded.values())) == 3
    nightly = dagbag.get_dag("dayone_nightly")
    used = {}
    for date in DATES:
        run = nightly.test(logical_date=date, run_conf=_conf(bucket), mark_success_pattern=AFTER_DEPLOY)
        assert str(run.state).endswith("success"), run.state
        ran = {ti.task_id for ti in run.get_task_instances() if str(ti.state).endswith("success")}
        assert {"plan", "pin", "engines.deploy"} <= ran
        run_dir = RunDir(dayone_run_id(run.run_id), run_root)
        pinned = run_dir.read_json("pinned.json")["sglang"]
        rendered = list(yaml.safe_load_all((run_dir.path / "k8s" / "sglang.yaml").read_text()))
        images = [c["image"] for o in rendered if o.get("kind") == "Deployment"
                  for c in o["spec"]["template"]["spec"]["containers"]]
        assert pinned["image_digest"] == seeded[date], date
        assert images and all(i.endswith("@" + seeded[date]) for i in images), images
        assert run_dir.read_json("state/steps/pin.json")["status"] == "ok"
        used[date] = pinned["image_digest"]
    assert used == seeded  # three dates, three different older digests, each from its own date


def test_backfill_of_a_date_without_catalog_entry_fails_naming_the_fix(s3_conn, run_root, bucket):
    from tasks.publish.catalog import CatalogError

    s3 = s3_conn.client()
    _seed_catalog(s3, bucket)
    with pytest.raises(CatalogError) as info:
        _pin(_conf(bucket), "backfill-missing", dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc), s3,
                     backfill=True)
    assert "2026-10-01T00-00-00Z" in str(info.value) and "engines[].digest" in str(info.value)
    assert "2026-11-22T00-00-00Z" in str(info.value)  # the dates it does have
    # An explicit digest in the run conf needs no catalog entry.
    conf = _conf(bucket)
    conf["engines"][0]["digest"] = _digest("explicit")
    out = _pin(conf, "backfill-explicit", dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc), s3, backfill=True)
    assert out["digests"] == {"sglang": _digest("explicit")}


def test_scheduled_run_records_the_local_identity_and_a_rerun_reads_it(s3_conn, run_root, bucket):
    from tasks.publish.catalog import read_entry
    from tasks.config import parse_run_config

    s3 = s3_conn.client()
    conf = {**_conf(bucket), "target": "local", "dry_run": False,
            "engines": [{"name": "sim-a", "dialect": "sglang", "launcher": "sim"}]}
    date = dt.datetime(2026, 11, 29, tzinfo=dt.timezone.utc)
    first = _pin(conf, "scheduled-1", date, s3, backfill=False)
    assert first["source"] == "pinned now"
    entry = read_entry(s3, parse_run_config(conf), date)
    assert entry["engines"]["sim-a"]["image_digest"] == first["digests"]["sim-a"]
    again = _pin(conf, "scheduled-1-rerun", date, s3, backfill=True)
    assert again["source"] == "catalog" and again["digests"] == first["digests"]
    changed = {**conf, "engines": [{"name": "sim-a", "dialect": "sglang", "launcher": "sim",
                                    "sim_profile": {"itl_s": 0.01}}]}
    with pytest.raises(Exception, match="cannot be run at an older identity"):
        _pin(changed, "scheduled-1-changed", date, s3, backfill=True)


def _pin(conf, run_id, logical_date, s3, backfill):
    """The pin step of a dated run, as the nightly runs it."""
    from tasks.steps import run_steps
    from tasks.steps.context import RunContext

    ctx = RunContext.build(conf, run_id, archive_client=lambda: s3, logical_date=logical_date, backfill=backfill)
    return run_steps.pin(ctx)


def test_backfill_runs_the_openwebui_image_its_date_recorded(s3_conn, run_root, bucket):
    from tasks.publish.catalog import read_entry, record
    from tasks.config import parse_run_config
    from tasks.state.documents import OPENWEBUI_PINNED
    from tasks.state.storage import RunDir

    s3 = s3_conn.client()
    conf = {**_conf(bucket), "scenarios": {**_conf(bucket)["scenarios"], "openwebui": {"enabled": True}}}
    date, digest = DATES[0], _digest("sglang then")
    recorded = "ghcr.io/open-webui/open-webui@" + _digest("openwebui then")
    record(s3, parse_run_config(conf), date, {"sglang": {"image": IMAGE, "image_digest": digest}},
           run_id="scheduled-then", openwebui={"pinned_ref": recorded})
    assert read_entry(s3, parse_run_config(conf), date)["openwebui"]["pinned_ref"] == recorded
    # the conf names OpenWebUI by tag: the date's digest is deployed, and no registry is asked (none here)
    out = _pin(conf, "backfill-openwebui", date, s3, backfill=True)
    assert out["source"] == "catalog" and out["digests"] == {"sglang": digest}
    assert RunDir("backfill-openwebui").read_json(OPENWEBUI_PINNED)["pinned_ref"] == recorded
