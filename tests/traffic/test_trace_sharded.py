"""The trace replayed over several client processes (tasks/load/shards.py run_streamed), against the simulator,
whose own log (/sim/requests) says what reached it and when: every row of the window sent exactly once, dealt to
the shards, each shard's clock offset measured and taken off its send stamps, so the rows' send times and
lateness are on the step's own clock. The shards' clocks are set half a second ahead for real (their time.time(),
through a sitecustomize of the test's on their path), so an offset left unapplied would show as 500 ms."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.scenarios.trace import run_trace
from tasks.sim.process import start_sim
from tasks.state.storage import RunDir

FAST = {"ttft_base_s": 0.002, "itl_s": 0.0005, "slots": 256, "cache_block_tokens": 16}
SYNTH = {"seed": 7, "requests": 60, "rate_rps": 30.0, "max_input_tokens": 1500, "max_output_tokens": 4}
SKEW_S = 0.5
# The simulator stamps an arrival when its loop takes the request: a stall on a loaded 2-core machine makes one
# late by up to this, never early; an offset left unapplied shows as 0.5 s on every row.
TOLERANCE_S = 0.300

SKEWED_CLOCK = '''
import sys, time
if any("_shard_main" in a for a in getattr(sys, "orig_argv", ())):
    _wall = time.time
    time.time = lambda: _wall() + {skew}
'''


def test_a_trace_replayed_over_two_client_processes_sends_each_row_once_on_the_step_s_clock(tmp_path: Path,
                                                                                           monkeypatch):
    cfg = parse_run_config({"run_id": "trace-shards",
                            "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
                            "engines": [{"name": "sim", "dialect": "vllm"}], "load": {"client_processes": 2},
                            "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False},
                                          "trace": {"enabled": True, "synthetic": SYNTH, "rounds": 1}}})
    with start_sim("vllm", FAST) as sim:
        skew = tmp_path / "skew"
        skew.mkdir()
        (skew / "sitecustomize.py").write_text(SKEWED_CLOCK.format(skew=SKEW_S))
        monkeypatch.setenv("PYTHONPATH", str(skew))  # the client processes start after this, the simulator before
        ectx = EngineContext(cfg, endpoint_for(cfg, "sim", sim.url, "sha256:" + "0" * 64),
                             RunDir("trace-shards", root=tmp_path))
        result = run_trace(ectx, None)
        served = json.loads(urllib.request.urlopen(sim.url + "/sim/requests").read())
    rows = ectx.run_dir.read_rows("trace_requests", "sim")
    shards = sorted(ectx.run_dir.read_rows("client_shards", "sim"), key=lambda r: r["shard"])
    # Every row once, and every request reached the server once.
    assert sorted(r["trace_line"] for r in rows) == list(range(1, SYNTH["requests"] + 1))
    assert all(r["status"] == "ok" for r in rows)
    ids = [s["request_id"] for s in served if s["request_id"].startswith("trace-")]
    assert sorted(ids) == sorted(r["request_id"] for r in rows) and len(set(ids)) == len(ids) == SYNTH["requests"]
    # Two processes, the rows dealt between them; each one's clock measured half a second ahead.
    assert [s["shard"] for s in shards] == [0, 1] and [s["requests"] for s in shards] == [30, 30], shards
    # within the ping's own uncertainty (half its round trip), which a stalled exchange widens
    assert all(abs(s["offset_s"] - SKEW_S) <= s["uncertainty_s"] + 0.005 for s in shards), shards
    assert all(s["shards_reason"] == "2 as the run config asks (load.client_processes)" for s in shards)
    (rnd,) = result["rounds"]
    assert rnd["client_processes"] == 2 and rnd["requests"] == SYNTH["requests"]
    # Send stamps on the step's clock: the simulator's own arrival stamps agree, and so lateness is small.
    # A send stamp is taken once the request is written, so its arrival is never earlier than the offset's
    # uncertainty allows; a stall only makes it later.
    early_s = max(s["uncertainty_s"] for s in shards) + 0.005
    arrivals = {s["request_id"]: s["arrival_ts"] for s in served}
    for r in rows:
        assert -early_s <= arrivals[r["request_id"]] - r["send_ts"] <= TOLERANCE_S, r
        assert r["lateness_s"] == r["send_ts"] - r["due_ts"]
    # most rows on time; a stall makes the few sent in its burst late
    assert rnd["lateness_p50_s"] is not None and -0.01 < rnd["lateness_p50_s"] < 0.1, rnd
    assert -0.01 < rnd["lateness_p99_s"] < TOLERANCE_S, rnd
