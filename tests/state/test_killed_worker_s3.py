"""A worker killed mid-round (kill -9 of `dayone step short`'s process group) with run state in S3,
then the task retried on another, empty worker.

The bound (tasks/state/partitions.py): a kill loses at most the requests in flight plus the chunk not yet
stored: fewer than CHUNK_ROWS rows, none completed more than CHUNK_EVERY_S (plus the 50 ms
hand-over and one PUT) before the kill. Counted against the simulator's ground truth
(/sim/requests). The retry replaces the partition whole: the killed try's chunks are deleted, no
row of it is read beside the retry's, and no request is there twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from storage_helpers import fresh_worker_env

from tasks.state.partitions import CHUNK_EVERY_S, CHUNK_ROWS, TRY_POINTER
from tasks.core.pipes import FLUSH_EVERY_S
from tasks.state.storage import RunDir

REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
RUN_ID = "killed-worker-s3"
CONCURRENCY = 4
REQUESTS = 200
KILL_AFTER_ROWS = 40
SLACK_S = 1.0  # one PUT and a scheduling hiccup on a shared two-core box


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


@pytest.fixture
def sim():
    from tasks.sim.process import start_sim

    # ~0.2 s a request: a round of 200 at concurrency 4 lasts ~10 s, long enough to be killed mid-way
    s = start_sim("sglang", {"ttft_base_s": 0.02, "itl_s": 0.02})
    yield s
    s.stop()


def _step(config_file, env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tasks.cli", "step", "short", "--config", str(config_file), "--run-id", RUN_ID,
         "--engine", "ext"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def test_kill_9_mid_round_loses_at_most_in_flight_plus_one_chunk_and_the_retry_replaces_the_partition(
        sim, staging, staging_env, tmp_path):
    from tasks.steps.execution import execute
    from tasks.steps.context import RunContext

    conf = _conf(sim.url)
    ctx = RunContext.build(conf, RUN_ID, staging=staging)
    for step in ("plan", "pin"):
        execute(ctx, step)
    execute(ctx, "deploy", "ext")
    execute(ctx, "wait_ready", "ext")
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(conf))
    run = RunDir(RUN_ID, staging)

    worker = _step(config_file, fresh_worker_env(tmp_path / "killed", staging_env))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(run.read_rows("requests", "ext")) < KILL_AFTER_ROWS:
        assert worker.poll() is None, worker.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    time.sleep(0.7 * CHUNK_EVERY_S)  # late in a chunk's life: near the most a kill can lose
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(10)
    killed_at = time.time()
    assert worker.returncode == -signal.SIGKILL
    base = "tables/requests/ext/short/"
    killed_try = [k for k in run.store.keys(base) if not k.endswith(TRY_POINTER)]

    rows = run.read_rows("requests", "ext")
    truth = [r for r in sim.requests() if r["request_id"].startswith("short-")]
    completed = {r["request_id"]: r for r in truth if r["status"] == 200 and r["finish_reason"] and not r["error"]}
    in_flight = len(truth) - len(completed)
    written = {r["request_id"] for r in rows if r["status"] == "ok"}
    assert KILL_AFTER_ROWS <= len(written) < REQUESTS, "the kill did not land mid-round"
    assert written <= set(completed)  # no invented rows
    lost = set(completed) - written
    assert len(lost) <= CONCURRENCY + CHUNK_ROWS, f"{len(lost)} completed requests lost"
    # Every request that completed more than a chunk's age before the kill is stored.
    horizon = killed_at - (CHUNK_EVERY_S + FLUSH_EVERY_S + SLACK_S)
    late = sorted(completed[i]["last_event_ts"] for i in lost)
    assert not late or late[0] >= horizon, f"a request completed {killed_at - late[0]:.2f} s before the kill was lost"
    oldest_lost_s = killed_at - late[0] if late else 0.0
    rate = len(completed) / max(1e-9, max(r["last_event_ts"] for r in completed.values())
                                 - min(r["last_event_ts"] for r in completed.values()))
    print(f"kill -9 after {len(written)} stored rows: {len(completed)} completed on the engine, {len(lost)} lost "
          f"(oldest completed {oldest_lost_s:.2f} s before the kill), {in_flight} in flight; "
          f"{rate:.0f} completions/s; bound: in flight + min({CHUNK_ROWS} rows, "
          f"{CHUNK_EVERY_S + FLUSH_EVERY_S:.2f} s x rate = {rate * (CHUNK_EVERY_S + FLUSH_EVERY_S):.0f} rows)")

    retry_started = time.time()
    retry = _step(config_file, fresh_worker_env(tmp_path / "retry", staging_env))
    assert retry.wait(180) == 0, retry.stderr.read().decode()[-2000:]
    retried = run.read_rows("requests", "ext")
    ids = [r["request_id"] for r in retried]
    assert len(ids) == REQUESTS and len(set(ids)) == REQUESTS
    assert all(r["send_ts"] >= retry_started for r in retried), "rows of the killed attempt were kept"
    assert written <= set(ids)  # request ids repeat across tries: a duplicate would have shown
    assert not set(killed_try) & set(run.store.keys(base)), "the killed try's chunks were left behind"
    rounds = run.read_rows("rounds", "ext")
    assert len(rounds) == 1 and rounds[0]["requests_ok"] == REQUESTS
