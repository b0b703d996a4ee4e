"""The trace scenario against a server written for the test: it records when each request arrived and the
token IDs of its prompt, so the replay is held to the trace itself: arrivals at the trace's timestamps over
the speed factor, and two requests share exactly the token prefix their leading block ids say."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from plain_server import MODEL, PlainServer
from schedule_fit import lateness

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.state.storage import RunDir
from tasks.scenarios.trace import run_trace

BLOCK = 16
SPEED = 2.0
# Mooncake rows (timestamp ms): a shared system prompt (blocks 0, 1), a conversation that extends the first
# row whole (blocks 0, 1, 2, 3 then 7), a row cut inside a block another row holds whole, rows without blocks.
TRACE = [
    {"timestamp": 0, "input_length": 60, "output_length": 3, "hash_ids": [0, 1, 2, 3]},
    {"timestamp": 100, "input_length": 40, "output_length": 2, "hash_ids": [0, 1, 4]},
    {"timestamp": 180, "input_length": 20, "output_length": 2},
    {"timestamp": 400, "input_length": 72, "output_length": 4, "hash_ids": [0, 1, 2, 3, 7]},
    {"timestamp": 400, "input_length": 23, "output_length": 1, "hash_ids": [0, 5]},
    {"timestamp": 650, "input_length": 40, "output_length": 2, "hash_ids": [0, 5, 6]},
    {"timestamp": 900, "input_length": 33, "output_length": 3, "hash_ids": [8, 9, 10]},
    {"timestamp": 1300, "input_length": 20, "output_length": 2},
    {"timestamp": 1400, "input_length": 50, "output_length": 2, "hash_ids": [0, 1, 4, 11]},
]
TOLERANCE_S = 0.050  # network and the server's thread taking its turn on a loaded 2-core machine
LATE_MAX_S = 0.25  # a client this late on a loaded machine still replays the trace's order and gaps


class ArrivalRecorder(PlainServer):
    """Records, per X-Request-Id, when the request arrived and its prompt's token IDs."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, dict[str, Any]] = {}

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        arrived = time.time()
        body = await request.json()
        self.seen[request.headers["X-Request-Id"]] = {"arrived": arrived, "prompt": body["prompt"],
                                                      "max_tokens": body.get("max_tokens")}
        return await super()._completions(request)


def _expected_shared(a: dict[str, Any], b: dict[str, Any]) -> int:
    """Leading tokens two trace rows share: their common leading blocks, up to the shorter cut of a block."""
    shared = 0
    for i, (x, y) in enumerate(zip(a.get("hash_ids") or [], b.get("hash_ids") or [])):
        if x != y:
            break
        size_a, size_b = (min(BLOCK, row["input_length"] - i * BLOCK) for row in (a, b))
        shared += min(size_a, size_b)
        if size_a != size_b:
            break
    return shared


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_replayed_arrivals_and_prompt_prefixes_follow_the_trace(tmp_path: Path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in TRACE))
    with ArrivalRecorder() as server:
        cfg = parse_run_config({"run_id": "trace-plain", "model": {"name": MODEL, "context_limit_tokens": 8192},
                                "engines": [{"name": "plain", "dialect": "vllm"}],
                                "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False},
                                              "trace": {"enabled": True, "path": str(trace), "block_tokens": BLOCK,
                                                        "speed": SPEED, "rounds": 2}}})
        ectx = EngineContext(cfg, endpoint_for(cfg, "plain", server.url, "sha256:" + "0" * 64),
                             RunDir("trace-plain", root=tmp_path / "runs"))
        result = run_trace(ectx, None)
    rows = ectx.run_dir.read_rows("trace_requests", "plain")
    assert len(rows) == 2 * len(TRACE) and all(r["status"] == "ok" for r in rows)
    assert [r["requests"] for r in result["rounds"]] == [len(TRACE)] * 2
    for n in (1, 2):
        got = sorted((r for r in rows if r["round"] == n), key=lambda r: r["trace_line"])
        assert [r["trace_line"] for r in got] == list(range(1, len(TRACE) + 1))
        seen = [server.seen[r["request_id"]] for r in got]
        # Arrivals against the trace's over the speed factor: a request is never sent early, and the server saw
        # it when the client says it sent it (due + its lateness), within the network's and the server's own
        # delay. The round's start is fitted over all arrivals (a stalled first one does not shift the rest);
        # a loaded 2-core machine stalls a process now and then, so one arrival of the round may exceed it.
        claimed_sends = []
        for row, trace_row, s in zip(got, TRACE, seen):
            due_rel = trace_row["timestamp"] / 1e3 / SPEED
            assert abs(row["due_ts"] - got[0]["due_ts"] - due_rel) < 1e-6
            assert -0.001 <= row["lateness_s"] <= LATE_MAX_S, row
            assert abs(row["lateness_s"] - (row["send_ts"] - row["due_ts"])) < 1e-9
            claimed_sends.append(due_rel + row["lateness_s"])
            assert s["max_tokens"] == trace_row["output_length"] and len(s["prompt"]) == trace_row["input_length"]
        off = lateness([s["arrived"] for s in seen], claimed_sends)
        assert statistics.median(off) <= TOLERANCE_S / 5 and sum(o > TOLERANCE_S for o in off) <= 1, off
        assert max(off) <= LATE_MAX_S, off
        # Exact shared prefixes: every pair shares what its leading block ids say, and no more.
        for i in range(len(TRACE)):
            for j in range(i + 1, len(TRACE)):
                shared = _common_prefix(seen[i]["prompt"], seen[j]["prompt"])
                assert shared == _expected_shared(TRACE[i], TRACE[j]), (i, j)
    # Each round's prompts are new: round 2 shares no prefix with round 1.
    first = {r["trace_line"]: server.seen[r["request_id"]]["prompt"] for r in rows if r["round"] == 1}
    second = {r["trace_line"]: server.seen[r["request_id"]]["prompt"] for r in rows if r["round"] == 2}
    assert all(_common_prefix(first[k], second[k]) == 0 for k in first)
    # The trace's own expected reuse: line 2 reuses blocks 0, 1 of line 1; line 4 all of line 1's four blocks
    # (60 tokens: three whole blocks and a cut one, not counted whole); line 6 block 0 (line 5 cut block 5);
    # line 9 blocks 0, 1 (line 2 held block 4 cut).
    expected = {r["trace_line"]: r["expected_cached_tokens"] for r in rows if r["round"] == 1}
    assert expected == {1: 0, 2: 32, 3: 0, 4: 48, 5: 16, 6: 16, 7: 0, 8: 0, 9: 32}
