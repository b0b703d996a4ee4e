"""A round's load as its rows record it (PROTOCOL.md section 6, "Closed and open loop"): a closed-loop
round has a concurrency and no rate, an open-loop (rate) round a rate, no concurrency and no in-flight cap;
the suites hold every per-round table to exactly one of the two."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tasks.scenarios.perf import run_perf
from tasks.sim.process import start_sim

ROOT = Path(__file__).resolve().parents[2]
FAST = {"ttft_base_s": 0.005, "itl_s": 0.001, "slots": 16}
PER_ROUND = ("requests", "rounds", "engine_rounds", "client_shards")

# Great Expectations in a process of its own, as in test_client_shards.py: its heap would slow later rounds' gc.
_VALIDATE = """
import json, sys
from tasks.state.tables import to_frame
from tasks.publish.validate import validate_frames
docs = json.load(sys.stdin)
print(json.dumps({k: validate_frames({t: to_frame(t, rows) for t, rows in tables.items()})
                  for k, tables in docs.items()}))
"""


def _validate(docs: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", _VALIDATE], cwd=ROOT, input=json.dumps(docs, default=str),
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_open_loop_rows_have_a_rate_and_no_concurrency_closed_loop_rows_the_reverse(make_ctx):
    scenarios = {"warmup": False,
                 "short": {"concurrency": [2], "rounds": 1, "requests_per_round": 4, "input_tokens": 16,
                           "output_tokens": 4},
                 "rate": {"enabled": True, "rates": [40.0], "rounds": 1, "requests_per_round": 6,
                          "input_tokens": 16, "output_tokens": 4, "seed": 1}}
    with start_sim("vllm", FAST) as sim:
        ctx = make_ctx(sim.url, "vllm", scenarios=scenarios)
        run_perf(ctx, "short")
        run_perf(ctx, "rate")
    tables = {t: ctx.run_dir.read_rows(t, "sim") for t in PER_ROUND}
    for t, rows in tables.items():
        closed = [r for r in rows if r["scenario"] == "short"]
        opened = [r for r in rows if r["scenario"] == "rate"]
        assert closed and opened, t
        assert all(r["concurrency"] == 2 and r["rate_rps"] is None for r in closed), (t, closed)
        assert all(r["concurrency"] is None and r["rate_rps"] == 40.0 for r in opened), (t, opened)
    for t in ("requests", "rounds"):  # the in-flight cap: none (open loop is uncapped), closed loop has its concurrency
        assert all(r["max_in_flight"] is None for r in tables[t]), t
    (rate_round,) = [r for r in tables["rounds"] if r["scenario"] == "rate"]
    assert rate_round["requests_ok"] + rate_round["requests_failed"] == 6  # what the round sent
    assert [r["requests"] for r in tables["client_shards"] if r["scenario"] == "rate"] == [6]

    bad_requests = [{**r, "concurrency": 6} for r in tables["requests"] if r["scenario"] == "rate"][:1] + [
        {**r, "concurrency": None} for r in tables["requests"] if r["scenario"] == "short"][:1]
    results = _validate({"good": tables, "bad": {"requests": bad_requests,
                                                 "rounds": [{**rate_round, "max_in_flight": None, "concurrency": 6}]}})
    assert all(results["good"][t]["success"] for t in PER_ROUND), results["good"]
    for t in ("requests", "rounds"):
        failed = {(f["expectation"], f["kwargs"].get("column")) for f in results["bad"][t]["failed"]}
        assert ("expect_column_values_to_be_null", "concurrency") in failed, (t, failed)  # where rate_rps is set
    failed = {(f["expectation"], f["kwargs"].get("column")) for f in results["bad"]["requests"]["failed"]}
    assert ("expect_column_values_to_not_be_null", "concurrency") in failed, failed
