"""A worker killed mid-round (kill -9 of `dayone step short`), then the task retried.

Rows stream to disk as requests complete, so the kill loses at most the requests in flight and
the rows the writer process had not yet been given a core to write, counted against the
simulator's ground truth (/sim/requests): every request that completed more than WRITER_LAG_S
before the kill is on disk. The retry, the same step with the same run id as Airflow's retry or a
re-run pod would do, rewrites the partition whole: no row of the killed attempt survives beside
the retry's, and no request is there twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from rel_helpers import REPO

RUN_ID = "killed-worker-run"
CONCURRENCY = 4
REQUESTS = 180
KILL_AFTER = 100  # requests completed on the engine: ~4 s in, at ~26 a second, most older than the lag
# The row writer runs at nice +10: on a loaded machine (a CI box deschedules a process for up to a second)
# its rows reach the disk late. A row lost to the kill completed at most this long before it.
WRITER_LAG_S = 2.0


def _conf(url: str) -> dict:
    return {
        "model": {"name": "dayone-sim-model", "context_limit_tokens": 4096},
        "engines": [{"name": "ext", "dialect": "sglang", "launcher": "external", "endpoint": url}],
        "scenarios": {
            "functional": {"enabled": False}, "warmup": False,
            "short": {"concurrency": [CONCURRENCY], "rounds": 1, "requests_per_round": REQUESTS,
                      "input_tokens": 32, "output_tokens": 8},
            "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
            "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
        },
        "request_timeout_s": 30,
    }


def _lines(path: Path) -> tuple[list[dict], int]:
    """(complete rows, torn lines) of a partition file."""
    rows, torn = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            torn += 1
    return rows, torn


def _completed(truth: list[dict]) -> set[str]:
    """The round's requests the engine answered in full (ground truth rows)."""
    return {r["request_id"] for r in truth if r["request_id"].startswith("short-") and r["status"] == 200
            and r["finish_reason"] and not r["error"]}


def _step(config_file: Path, root: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tasks.cli", "step", "short", "--config", str(config_file), "--run-id", RUN_ID,
         "--engine", "ext"],
        cwd=REPO, env={**os.environ, "DAYONE_WORKDIR": str(root)}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True,
    )


@pytest.fixture
def sim():
    from tasks.sim.process import start_sim

    # ~0.15 s a request: a round of 180 at concurrency 4 lasts long enough to be killed mid-way
    s = start_sim("sglang", {"ttft_base_s": 0.02, "itl_s": 0.02})
    yield s
    s.stop()


def test_kill_9_mid_round_loses_only_requests_in_flight_and_the_retry_replaces_the_partition(
        sim, tmp_path, monkeypatch):
    from tasks.steps.execution import execute
    from tasks.steps.context import RunContext

    root = tmp_path / "runs"
    monkeypatch.setenv("DAYONE_WORKDIR", str(root))
    conf = _conf(sim.url)
    ctx = RunContext.build(conf, RUN_ID)
    for step in ("plan", "pin"):
        execute(ctx, step)
    execute(ctx, "deploy", "ext")
    execute(ctx, "wait_ready", "ext")
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(conf))
    partition = root / RUN_ID / "tables" / "requests" / "ext" / "short.jsonl"

    worker = _step(config_file, root)
    deadline = time.monotonic() + 120
    # timed by the engine's count, not by the rows on disk (a kill that waits to see rows lands just after a
    # write): it falls anywhere between the writer's writes, so rows held back for a later write are lost by it
    while time.monotonic() < deadline and len(_completed(sim.requests())) < KILL_AFTER:
        assert worker.poll() is None, worker.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    killed_at = time.time()
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(10)
    assert worker.returncode == -signal.SIGKILL

    rows, torn = _lines(partition) if partition.exists() else ([], 0)
    assert torn <= 1  # at most the line being written at the kill
    truth = sim.requests()
    completed = _completed(truth)
    written = {r["request_id"] for r in rows if r["status"] == "ok"}
    assert len(written) < REQUESTS, "the kill did not land mid-round"
    assert written <= completed  # no invented rows
    lost = completed - written
    # every request that completed well before the kill is on disk: a lost one was in flight (the client had
    # not read its end) or its row was still on its way to the disk
    ended = {r["request_id"]: r["last_event_ts"] for r in truth if r["request_id"] in completed}
    assert all(ended.values())
    lost_age = sorted((round(killed_at - ended[i], 3), i) for i in lost)
    done_before = {i for i, ts in ended.items() if ts < killed_at - WRITER_LAG_S}
    assert len(done_before) >= 40, f"the kill came too early to show the rows stream: {len(done_before)} old enough"
    assert done_before <= written, (f"{len(done_before - written)} rows lost that completed over {WRITER_LAG_S} s "
                                    f"before the kill, the oldest {lost_age[-5:]}")
    print(f"kill -9 after {len(written)} rows: {len(completed)} completed on the engine, {len(lost)} lost "
          f"(completed this many s before the kill: {[a for a, _ in lost_age]}), "
          f"{torn} torn line(s)")

    retry_started = time.time()
    retry = _step(config_file, root)
    assert retry.wait(180) == 0, retry.stderr.read().decode()[-2000:]
    retried, torn = _lines(partition)
    ids = [r["request_id"] for r in retried]
    assert torn == 0 and len(ids) == REQUESTS and len(set(ids)) == REQUESTS
    assert all(r["send_ts"] >= retry_started for r in retried), "rows of the killed attempt were kept"
    assert written <= set(ids)  # request ids repeat across tries: a duplicate would have shown
    assert all(r["status"] == "ok" for r in retried)
    rounds, _ = _lines(root / RUN_ID / "tables" / "rounds" / "ext" / "short.jsonl")
    assert len(rounds) == 1 and rounds[0]["requests_ok"] == REQUESTS
