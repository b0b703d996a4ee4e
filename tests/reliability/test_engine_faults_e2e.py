"""Engine faults survived end to end: one dag.test() run, one simulated engine per fault.

crash mid-round, never ready, an HTTP 503 burst, a stall mid-stream, malformed SSE and cut
streams. Scenario sizes are tiny and predictable (no warmup, no functional checks), so the rows
each fault must leave can be counted exactly.
"""

from __future__ import annotations

import io
import re

import pandas as pd
import pytest
from rel_helpers import pid_alive, run_eval, s3_env

FAST = {"ttft_base_s": 0.002, "itl_s": 0.002}
SHORT_ROUNDS, SHORT_REQUESTS = 2, 8  # per round, concurrency 2
DECODE_REQUESTS = 2
CRASH_AFTER = 6  # finished requests: the readiness probe's 1-token generation, then five short ones
REQUEST_TIMEOUT_S = 2.0
READY_TIMEOUT_S = 3.0
STALL_EVERY, MALFORMED_EVERY, CUT_EVERY = 4, 3, 5
BUCKET = "dayone-faults"

CONF = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 4096},
    "engines": [
        {"name": "crash", "dialect": "sglang",
         # slower tokens, so at most one other request can finish in the 50 ms before the exit
         "sim_profile": {"ttft_base_s": 0.002, "itl_s": 0.03, "faults": {"crash_after_requests": CRASH_AFTER}}},
        {"name": "never", "dialect": "sglang", "ready_timeout_s": READY_TIMEOUT_S,
         "sim_profile": {**FAST, "faults": {"never_ready": True}}},
        {"name": "burst", "dialect": "vllm",
         # arrivals 4-6: the probe is arrival 1, so short requests 3-5 of round 1 get a 503
         "sim_profile": {**FAST, "faults": {"error_burst": {"after_requests": 3, "count": 3, "status": 503}}}},
        {"name": "stall", "dialect": "sglang",
         "sim_profile": {**FAST, "faults": {"stall": {"after_events": 2, "seconds": 30, "every_nth": STALL_EVERY}}}},
        {"name": "badstream", "dialect": "vllm",
         "sim_profile": {**FAST, "faults": {"malformed_sse_every_nth": MALFORMED_EVERY,
                                            "cut_stream_every_nth": CUT_EVERY}}},
    ],
    "scenarios": {
        "functional": {"enabled": False},
        "warmup": False,
        "short": {"concurrency": [2], "rounds": SHORT_ROUNDS, "requests_per_round": SHORT_REQUESTS,
                  "input_tokens": 32, "output_tokens": 8},
        "decode": {"concurrency": [1], "rounds": 1, "requests_per_round": DECODE_REQUESTS,
                   "input_tokens": 16, "output_tokens": 8},
        "prefill": {"enabled": False}, "rate": {"enabled": False}, "long_context": {"enabled": False},
        "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
    },
    "archive": {"bucket": BUCKET},
    "request_timeout_s": REQUEST_TIMEOUT_S,
}
ENGINES = [e["name"] for e in CONF["engines"]]
for _e in CONF["engines"]:
    _e["node"] = f"node-{_e['name']}"  # one lane each: engines on one node are limited per run


# What a killed earlier try of the burst engine's short task left on disk: its rows (with the ids
# a retry sends again) and a line torn by the kill. The retry must keep none of it.
STALE_IDS = [f"short-killed-try-{i}" for i in range(5)]


def _seed_killed_try(root, run_id: str) -> None:
    from tasks.state.storage import RunDir

    run_dir = RunDir(run_id, root)
    keys = {"run_id": run_id, "engine": "burst", "image_digest": "sha256:" + "0" * 64, "scenario": "short",
            "round": 1, "concurrency": 2, "rate_rps": None, "first_encounter": True}
    with run_dir.rows("requests", "burst", "short") as out:
        for rid in STALE_IDS:
            out.write({**keys, "request_id": rid, "send_ts": 1.0, "status": "ok"})
    with open(run_dir.path / "tables" / "requests" / "burst" / "short.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"run_id": "torn by the kill", "request_')
    with run_dir.rows("rounds", "burst", "short") as out:
        out.write({**keys, "warmup": False, "status": "ok", "requests_ok": 5})


@pytest.fixture(scope="module")
def faults_run(eval_dag, planted_s3, tmp_path_factory):
    import datetime as dt

    from dayone_airflow.glue import dayone_run_id

    root = tmp_path_factory.mktemp("faults-runs")
    when = dt.datetime.now(dt.timezone.utc)
    expected_run_id = dayone_run_id(f"manual__{when.isoformat()}")
    _seed_killed_try(root, expected_run_id)
    run = run_eval(eval_dag, CONF, root, s3_env(planted_s3), when=when)
    assert run.run_dir.run_id == expected_run_id, "the killed try was seeded under another run id"
    return run


def _archived(run, planted_s3, engine: str, table: str) -> pd.DataFrame:
    prefix = run.run_dir.read_json("archive.json")["prefixes"][engine]
    body = planted_s3.client().get_object(Bucket=BUCKET, Key=prefix + f"tables/{table}.parquet")["Body"].read()
    return pd.read_parquet(io.BytesIO(body))


def _short(rows):
    return [r for r in rows if r["scenario"] == "short"]


def test_run_fails_overall_and_names_the_engine_that_never_became_ready(faults_run):
    assert str(faults_run.run.state).endswith("failed"), faults_run.run.state
    assert faults_run.outcome("never-wait_ready")["status"] == "failed"
    for engine in ENGINES:  # every engine reached its teardown, whatever happened before
        assert faults_run.outcome(f"{engine}-teardown")["status"] == "ok", engine
        pid = faults_run.run_dir.read_json(f"deployments/{engine}.json", {}).get("handle", {}).get("pid")
        assert pid and not pid_alive(int(pid)), f"{engine}: engine process left running"
    assert faults_run.outcome("archive")["status"] == "ok"
    assert faults_run.outcome("report")["status"] == "ok"


def test_crash_mid_round_keeps_every_completed_request(faults_run, planted_s3):
    rows = _short(faults_run.rows("requests", "crash"))
    ok = [r for r in rows if r["status"] == "ok"]
    # the probe was finished request 1; every short request finished before the crash is a row
    assert CRASH_AFTER - 1 <= len(ok) <= CRASH_AFTER, len(ok)
    assert len(rows) == SHORT_ROUNDS * SHORT_REQUESTS  # the rest are error rows, none missing
    assert all(r["error"] for r in rows if r["status"] != "ok")
    archived = _archived(faults_run, planted_s3, "crash", "requests")
    assert set(archived[archived["status"] == "ok"]["request_id"]) == {r["request_id"] for r in ok}
    assert archived["request_id"].is_unique
    rounds = [r for r in faults_run.rows("rounds", "crash") if r["scenario"] == "short"]
    assert [r["status"] for r in sorted(rounds, key=lambda r: r["round"])] == ["failed", "failed"]
    assert "simulated engine crash" in (faults_run.run_dir.path / "logs" / "crash.log").read_text()
    # the run went on to the next scenario: decode was attempted, its failures are rows, and a step whose
    # requests all failed is a failed step that says so (a broken engine never passes on its rows alone)
    decode_outcome = faults_run.outcome("crash-decode")
    assert decode_outcome["status"] == "failed" and "measured requests failed" in decode_outcome["detail"], decode_outcome
    decode = [r for r in faults_run.rows("requests", "crash") if r["scenario"] == "decode"]
    assert len(decode) == DECODE_REQUESTS and all(r["status"] == "error" for r in decode)


def test_never_ready_times_out_with_a_clear_error_and_nothing_else_is_attempted(faults_run):
    detail = faults_run.outcome("never-wait_ready")["detail"]
    assert re.search(rf"engine never: not ready after {READY_TIMEOUT_S:.0f} s \(last stage \w+", detail), detail
    for step in ("startup_findings", "short", "decode"):
        assert faults_run.outcome(f"never-{step}")["status"] == "not_attempted", step
    assert faults_run.rows("requests", "never") == []
    ready = faults_run.run_dir.read_json("state/never/ready.json")
    assert ready["ready"] is False and "not ready after" in ready["detail"]
    # the other engines still ran
    assert len(_short(faults_run.rows("requests", "burst"))) == SHORT_ROUNDS * SHORT_REQUESTS


def test_http_503_burst_is_error_rows_and_the_error_rate_decides_the_round(faults_run, planted_s3):
    rows = _short(faults_run.rows("requests", "burst"))
    failed = [r for r in rows if r["status"] != "ok"]
    assert len(failed) == 3 and all(r["round"] == 1 for r in failed)
    assert all(r["http_status"] == 503 and r["error"].startswith("HTTP 503") for r in failed)
    rounds = {r["round"]: r for r in faults_run.rows("rounds", "burst") if r["scenario"] == "short"}
    assert rounds[1]["status"] == "failed" and rounds[1]["error_rate"] == pytest.approx(3 / SHORT_REQUESTS)
    assert rounds[2]["status"] == "ok" and rounds[2]["error_rate"] == 0
    archived = _archived(faults_run, planted_s3, "burst", "requests")
    assert int((archived["http_status"] == 503).sum()) == 3


def test_stall_mid_stream_ends_at_the_request_timeout(faults_run):
    rows = _short(faults_run.rows("requests", "stall"))
    timed_out = [r for r in rows if r["status"] == "timeout"]
    assert len(timed_out) == SHORT_ROUNDS * SHORT_REQUESTS // STALL_EVERY
    for r in timed_out:
        assert f"no complete response within {REQUEST_TIMEOUT_S:g} s" in r["error"]
        assert r["ttft_s"] is not None  # the first output arrived before the stall
    assert all(r["status"] == "ok" for r in rows if r not in timed_out)


def test_malformed_sse_and_cut_streams_are_error_rows_and_the_client_keeps_going(faults_run):
    rows = _short(faults_run.rows("requests", "badstream"))
    n = SHORT_ROUNDS * SHORT_REQUESTS
    bad_streams = {i for i in range(1, n + 1) if i % MALFORMED_EVERY == 0 or i % CUT_EVERY == 0}
    errors = [r for r in rows if r["status"] != "ok"]
    assert len(rows) == n and len(errors) == len(bad_streams)
    kinds = {"malformed" if "malformed" in r["error"] else "cut" if "before [DONE]" in r["error"] else r["error"]
             for r in errors}
    assert kinds == {"malformed", "cut"}, kinds
    assert len([r for r in rows if r["status"] == "ok"]) == n - len(bad_streams)


def test_a_retried_benchmark_task_keeps_no_row_of_the_killed_try(faults_run, planted_s3):
    partition = faults_run.run_dir.path / "tables" / "requests" / "burst" / "short.jsonl"
    lines = partition.read_text(encoding="utf-8").splitlines()
    assert all(line.startswith("{") and line.endswith("}") for line in lines)  # the torn line went too
    rows = _short(faults_run.rows("requests", "burst"))
    ids = [r["request_id"] for r in rows]
    assert len(ids) == SHORT_ROUNDS * SHORT_REQUESTS and len(set(ids)) == len(ids)
    assert not set(STALE_IDS) & set(ids) and all(r["send_ts"] > 1.0 for r in rows)
    rounds = [r for r in faults_run.rows("rounds", "burst") if r["scenario"] == "short"]
    assert sorted(r["round"] for r in rounds) == [1, 2]
    archived = _archived(faults_run, planted_s3, "burst", "requests")
    assert not set(STALE_IDS) & set(archived["request_id"]) and archived["request_id"].is_unique
