"""One dag.test() run with three injected problems at once:

- the engine crashes right after the first boundary request and its supervisor restarts it:
  the boundary check must fail and say so;
- the S3 server is stopped in the middle of the archive and started again: the archive task
  retries and completes, every object written exactly once, byte-identical to a clean archive;
- the archive connection and the engine's environment carry planted secrets: not one produced
  byte (run directory, S3 objects, Airflow task logs, XCom) may contain them.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rel_helpers import (PLANTED, PLANTED_ENGINE_LICENSE, PLANTED_ENGINE_TOKEN, pid_alive, run_eval,
                         s3_env)

BUCKET = "dayone-outage"
INTERNAL_IP, INTERNAL_HOST = "10.41.7.13", "gpu-node-7.cluster.local"
STARTUP_TOKEN = "hf_startupLogToken0123456789abcd"
STARTUP_WARNING = (f"WARNING NCCL falling back to socket transport: peer {INTERNAL_HOST} ({INTERNAL_IP}:5000), "
                   f"Authorization: Bearer {STARTUP_TOKEN}")
SHORT_REQUESTS = 4
# finished generations before the crash: readiness probe, the short requests, the boundary's own
# readiness probe and its chat-template probe, then the first boundary needle
CRASH_AFTER = 1 + SHORT_REQUESTS + 1 + 1 + 1
STOP_AFTER_PUTS = 3  # the S3 server goes down after this many objects of the archive
OUTAGE_S = 3.0

CONF = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 4096},
    "engines": [{
        "name": "restart", "dialect": "sglang",
        "env": {"HF_TOKEN": PLANTED_ENGINE_TOKEN, "ENGINE_LICENSE": PLANTED_ENGINE_LICENSE},
        # internal addresses in the engine's flags: recorded in the run, never published
        "args": ["--dist-init-addr", f"{INTERNAL_IP}:5000", "--host", INTERNAL_HOST],
        # a startup warning naming internal addresses and a token: its line becomes a startup finding
        "sim_profile": {"ttft_base_s": 0.002, "itl_s": 0.002, "startup_log_lines": [STARTUP_WARNING],
                        "faults": {"crash_after_requests": CRASH_AFTER, "restart_on_crash": True}},
    }],
    "scenarios": {
        "functional": {"enabled": False},
        "warmup": False,
        "short": {"concurrency": [1], "rounds": 1, "requests_per_round": SHORT_REQUESTS,
                  "input_tokens": 32, "output_tokens": 8},
        "boundary": {"lengths": [600, 700], "output_tokens": 4},
        "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
        "long_context": {"enabled": False}, "prefix_cache": {"enabled": False},
    },
    "archive": {"bucket": BUCKET},
    "request_timeout_s": 30,
}


class PutLog:
    """Watches every S3 client the run builds: object puts by key, retried calls, and the outage."""

    def __init__(self, server: Any):
        self.server = server
        self.written: Counter[str] = Counter()
        self.retries = 0
        self.outage: dict[str, float] = {}
        self._restart: threading.Thread | None = None

    def attach(self, client: Any) -> Any:
        client.meta.events.register("provide-client-params.s3.PutObject", self._key)
        client.meta.events.register("after-call.s3.PutObject", self._written)
        client.meta.events.register("needs-retry.s3", self._retry)
        return client

    def _key(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["dayone_key"] = params["Key"]

    def _retry(self, caught_exception: Exception | None = None, **_: Any) -> None:
        if caught_exception is not None:
            self.retries += 1

    def _written(self, http_response: Any, context: dict[str, Any], **_: Any) -> None:
        if http_response.status_code != 200:
            return
        self.written[context["dayone_key"]] += 1
        if sum(self.written.values()) == STOP_AFTER_PUTS and not self.outage:
            self.outage["stopped"] = time.monotonic()
            self.server.stop()  # mid-archive: the next call finds nothing listening

            def restart() -> None:
                time.sleep(OUTAGE_S)
                self.server.start()
                self.outage["started"] = time.monotonic()

            self._restart = threading.Thread(target=restart, daemon=True)
            self._restart.start()

    def wait(self) -> None:
        if self._restart is not None:
            self._restart.join(120)


class LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # noqa: BLE001 -- a record that cannot be formatted is not ours to judge
            self.lines.append(str(record.msg))


@pytest.fixture(scope="module")
def outage_run(eval_dag, planted_s3, tmp_path_factory):
    import tasks.publish.archive

    puts = PutLog(planted_s3)
    real_make_client = tasks.publish.archive.make_client
    capture = LogCapture()
    root_logger = logging.getLogger()
    root_logger.addHandler(capture)
    try:
        run = run_eval(eval_dag, CONF, tmp_path_factory.mktemp("outage-runs"), s3_env(planted_s3),
                       setup=lambda mp: mp.setattr(tasks.publish.archive, "make_client",
                                                   lambda *a, **k: puts.attach(real_make_client(*a, **k))))
    finally:
        root_logger.removeHandler(capture)
        puts.wait()
    return run, puts, capture


def test_engine_restart_during_the_boundary_scenario_is_a_failed_check(outage_run):
    run, _, _ = outage_run
    [check] = [r for r in run.rows("checks", "restart") if r["check"] == "boundary_restarts"]
    assert check["outcome"] == "fail", check
    assert "restarted during the boundary requests: 600 tokens (0 -> 1)" in check["evidence"]["reason"]
    needles = run.rows("needles", "restart")
    assert [n["target_tokens"] for n in needles] == [600, 700]
    assert needles[0]["status"] == "ok"  # the engine answered, then crashed: still a failure
    assert "restarting it (restart 1)" in (run.run_dir.path / "logs" / "restart.log").read_text()
    # the short scenario before it was untouched by the crash
    assert [r["status"] for r in run.rows("requests", "restart")] == ["ok"] * SHORT_REQUESTS
    assert run.outcome("restart-teardown")["status"] == "ok"
    pid = run.run_dir.read_json("deployments/restart.json")["handle"]["pid"]
    assert not pid_alive(int(pid)), "the supervisor and its server outlived the teardown"


def test_s3_outage_mid_archive_is_retried_with_every_object_written_once(outage_run, planted_s3):
    import tasks.publish.archive
    from tasks.steps.context import load_config

    run, puts, _ = outage_run
    assert puts.outage.get("stopped") and puts.outage.get("started"), "the outage never happened"
    assert puts.retries >= 1, "no call failed during the outage: it was not mid-archive"
    assert run.outcome("archive")["status"] == "ok"
    assert run.outcome("report")["status"] == "ok"
    archived = run.run_dir.read_json("archive.json")
    assert sorted(puts.written) == sorted(set(puts.written))
    assert all(n == 1 for n in puts.written.values()), {k: n for k, n in puts.written.items() if n != 1}
    assert set(archived["keys"]) <= set(puts.written)
    s3 = planted_s3.client()
    stored = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert set(stored) == set(puts.written)
    # a clean archive of the same run writes nothing and finds every object byte-identical
    # (put_once raises WriteOnceError on any difference, and a half-written object differs)
    again = PutLog(planted_s3)
    cfg = load_config(CONF, run.run_dir.run_id)
    result = tasks.publish.archive.archive_run(run.run_dir, cfg, again.attach(planted_s3.client()))
    assert result["keys"] == archived["keys"]
    assert not again.written


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_planted_secrets_appear_in_no_produced_byte(outage_run, planted_s3):
    run, _, capture = outage_run
    produced: dict[str, bytes] = {}
    for p in _files(run.run_dir.path):
        produced[f"run dir {p.relative_to(run.run_dir.path)}"] = p.read_bytes()
    s3 = planted_s3.client()
    for obj in s3.list_objects_v2(Bucket=BUCKET)["Contents"]:
        produced[f"s3 {obj['Key']}"] = s3.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read()
    home = Path(os.environ["AIRFLOW_HOME"])
    for p in _files(home / "logs"):
        produced[f"airflow log {p.relative_to(home)}"] = p.read_bytes()
    produced["task log records"] = "\n".join(capture.lines).encode()
    with sqlite3.connect(home / "airflow.db") as db:
        xcoms = db.execute("SELECT task_id, value FROM xcom WHERE run_id = ?", (run.run.run_id,)).fetchall()
    assert xcoms, "no XCom of the run found: the query looks in the wrong place"
    for task_id, value in xcoms:
        produced[f"xcom {task_id}"] = value if isinstance(value, bytes) else str(value).encode()
    assert len(capture.lines) > 50 and any("step plan done" in line for line in capture.lines)
    assert any(k.startswith("s3 ") and k.endswith("manifest.json") for k in produced)
    leaks = [(where, secret) for where, data in produced.items() for secret in PLANTED if secret.encode() in data]
    assert not leaks, leaks
    # the manifest keeps the names of the engine's environment, never the values
    manifest = run.run_dir.read_json("manifest.json")
    assert manifest["config"]["engines"][0]["env"] == {"HF_TOKEN": "<redacted>", "ENGINE_LICENSE": "<redacted>"}


def test_archived_summaries_carry_no_internal_hosts_ips_or_tokens(outage_run, planted_s3):
    import re

    run, _, _ = outage_run
    s3 = planted_s3.client()
    published = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]
                 if o["Key"].endswith(("summary.json", "manifest.json", "report.html", "validation.json"))
                 or "/_index/" in o["Key"]]
    assert {k.rsplit("/", 1)[-1] for k in published} >= {"summary.json", "manifest.json", "report.html"}
    for key in published:
        text = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()
        for needle in (INTERNAL_IP, INTERNAL_HOST, "127.0.0.1", "localhost"):
            assert needle not in text, (key, needle)
        assert not re.search(r"\b(?:\d{1,3}\.){3}\d{1,3}:\d+\b", text), key
    # the run directory keeps what was configured (it is private to the run)
    assert INTERNAL_HOST in (run.run_dir.path / "manifest.json").read_text()


def test_archived_tables_carry_no_internal_hosts_ips_or_tokens(outage_run, planted_s3):
    """Error strings and startup log lines reach the tables; every archived CSV and Parquet is scrubbed."""
    import io
    import re

    import pandas as pd

    run, _, _ = outage_run
    s3 = planted_s3.client()
    tables = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"] if "/tables/" in o["Key"]]
    assert {k.rsplit("/", 1)[-1] for k in tables} >= {"requests.csv", "requests.parquet", "needles.parquet",
                                                      "startup_findings.csv", "checks.parquet"}
    # the private rows hold what the scrubber must catch, so the check below can fail
    [finding] = [r for r in run.rows("startup_findings", "restart") if INTERNAL_HOST in r["line"]]
    assert INTERNAL_IP in finding["line"] and STARTUP_TOKEN in finding["line"]
    scrubbed = pd.read_csv(io.BytesIO(s3.get_object(
        Bucket=BUCKET, Key=next(k for k in tables if k.endswith("startup_findings.csv")))["Body"].read()))
    assert any("peer <host> (<ip>), Authorization: Bearer <redacted>" in line for line in scrubbed["line"])
    for key in tables:
        body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        text = (pd.read_parquet(io.BytesIO(body)).to_csv(index=False) if key.endswith(".parquet")
                else body.decode())
        for needle in (INTERNAL_IP, INTERNAL_HOST, STARTUP_TOKEN, "127.0.0.1", "localhost", *PLANTED):
            assert needle not in text, (key, needle)
        assert not re.search(r"\b(?:\d{1,3}\.){3}\d{1,3}:\d+\b", text), key
