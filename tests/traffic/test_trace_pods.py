"""The trace replayed by two runner pods together (tasks/load/pod_shards.py PodShards.measure_streamed), against the
simulator, whose own log says what reached it and when: shard 0 (this process) deals the rows, the peer pod (a
process of its own, as a pod is, its clock 5 s ahead) gets its share over the signed link a second ahead of their
times and sends them from its own client process; every row is sent exactly once, and every send time, the
peer's too, is put on shard 0's clock (the peer's offset, and its client process's against it) before the rows
merge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.load import pod_shards
from tasks.load.pod_shards import PodShards
from tasks.scenarios.trace import run_trace
from tasks.sim.process import start_sim
from tasks.state.storage import RunDir

REPO = Path(__file__).resolve().parents[2]
GROUP, OFFSET_S = "trace-sim", 5.0
FAST = {"ttft_base_s": 0.002, "itl_s": 0.0005, "slots": 256, "cache_block_tokens": 16}
SYNTH = {"seed": 3, "requests": 40, "rate_rps": 20.0, "max_input_tokens": 1200, "max_output_tokens": 4}
# The simulator stamps an arrival when its loop takes the request: a stall on a loaded 2-core machine makes one
# late by up to this, never early; an offset misapplied shows as 5 s on the peer's rows.
TOLERANCE_S = 0.300
PEER = """
import sys, time
_wall = time.time
time.time = lambda: _wall() + float(sys.argv[1])
from tasks.load.pod_shards import serve_peer
from tasks.state.storage import RunDir
sys.exit(serve_peer(RunDir("run-pods", root=sys.argv[2]), sys.argv[3], 1, 60))
"""


def test_two_runner_pods_replay_one_trace_round_each_row_once_on_shard_0s_clock(tmp_path: Path):
    cfg = parse_run_config({"run_id": "trace-pods",
                            "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
                            "engines": [{"name": "sim", "dialect": "vllm"}],
                            "load": {"streams_per_process": 10},  # 40 rows: two pods of one core
                            "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False},
                                          "trace": {"enabled": True, "synthetic": SYNTH, "rounds": 1}}})
    staging = tmp_path / "staging"
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(OFFSET_S), str(staging), GROUP], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        with start_sim("vllm", FAST) as sim:
            ectx = EngineContext(cfg, endpoint_for(cfg, "sim", sim.url, "sha256:" + "0" * 64),
                                 RunDir("trace-pods", root=tmp_path / "run"))
            with pod_shards.leading(PodShards(RunDir("run-pods", root=staging), GROUP, 2, 1, 10, 60,
                                              host="127.0.0.1")):
                result = run_trace(ectx, None)
            served = json.loads(urllib.request.urlopen(sim.url + "/sim/requests").read())
    finally:
        out, _ = peer.communicate(timeout=60)
    assert peer.returncode == 0, out
    assert "replayed its share of a streamed round" in out, out
    rows = ectx.run_dir.read_rows("trace_requests", "sim")
    assert sorted(r["trace_line"] for r in rows) == list(range(1, SYNTH["requests"] + 1))
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["status"] != "ok"]
    ids = [s["request_id"] for s in served if s["request_id"].startswith("trace-")]
    assert sorted(ids) == sorted(r["request_id"] for r in rows) and len(set(ids)) == SYNTH["requests"]
    shards = sorted(ectx.run_dir.read_rows("client_shards", "sim"), key=lambda r: r["shard"])
    assert [(s["pod"], s["pods"], s["requests"]) for s in shards] == [(0, 2, 20), (1, 2, 20)], shards
    assert shards[0]["shards_reason"].startswith("40 streams over 2 runner pods")
    # The peer pod's clock is 5 s ahead, its client process's (a fresh Python) is not: the two offsets measured
    # compose to the process's own against shard 0, about 0: within the two pings' uncertainty (half their round
    # trips, summed), which a stalled exchange widens.
    assert abs(shards[1]["offset_s"]) <= shards[1]["uncertainty_s"] + 0.005, shards[1]
    # A send stamp is taken once the request is written: its arrival is never earlier than the offsets'
    # uncertainty allows; a stall only makes it later.
    early_s = max(s["uncertainty_s"] for s in shards) + 0.005
    arrivals = {s["request_id"]: s["arrival_ts"] for s in served}
    assert all(-early_s <= arrivals[r["request_id"]] - r["send_ts"] <= TOLERANCE_S for r in rows), rows
    (rnd,) = result["rounds"]
    assert rnd["requests"] == SYNTH["requests"], rnd
    # most rows on time; a stall makes the few sent in its burst late
    assert -0.01 < rnd["lateness_p50_s"] < 0.1 and -0.01 < rnd["lateness_p99_s"] < TOLERANCE_S, rnd
