"""The simulator serves a replayed trace with exact ground truth (its /sim/requests): the arrivals it logged
follow the trace's schedule, and the prefix-cache hits it reports for each request are exactly what a cache
of its block size holds for the replayed prompts, shared prefixes included."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.state.storage import RunDir
from tasks.scenarios.trace import round_salt, run_trace
from tasks.sim.process import start_sim
from tasks.traffic.trace_formats import read_trace
from tasks.traffic.trace_prompts import prompt_token_ids
from tasks.traffic.trace_synth import synthetic_lines

SIM_BLOCK = 16  # the simulator's cache block (its profile's default)
FAST = {"ttft_base_s": 0.002, "itl_s": 0.0005, "slots": 256, "cache_block_tokens": SIM_BLOCK}
# The simulator stamps an arrival when its loop takes the request: a stall of the client or the simulator on a
# loaded 2-core machine (100s of ms) moves a row's arrival against its send by up to this.
TOLERANCE_S = 0.300
SYNTH = {"seed": 4, "requests": 40, "rate_rps": 40.0, "max_input_tokens": 2500, "max_output_tokens": 4}


def _hits(prompts: list[list[int]]) -> list[int]:
    """An unbounded prefix cache of SIM_BLOCK-token blocks, chained (a block matches only after its whole
    prefix), the last prompt token always computed: the cached tokens of each prompt in turn."""
    held: set[tuple[int, ...]] = set()
    out = []
    for p in prompts:
        matchable = (len(p) - 1) // SIM_BLOCK
        keys = [tuple(p[: (i + 1) * SIM_BLOCK]) for i in range(len(p) // SIM_BLOCK)]
        n = 0
        while n < matchable and keys[n] in held:
            n += 1
        held.update(keys)
        out.append(n * SIM_BLOCK)
    return out


def test_the_simulator_logs_the_trace_arrivals_and_hits_its_shared_prefixes(tmp_path: Path):
    cfg = parse_run_config({"run_id": "trace-sim", "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
                            "engines": [{"name": "sim", "dialect": "vllm"}],
                            "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False},
                                          "trace": {"enabled": True, "synthetic": SYNTH, "rounds": 1}}})
    with start_sim("vllm", FAST) as sim:
        ectx = EngineContext(cfg, endpoint_for(cfg, "sim", sim.url, "sha256:" + "0" * 64),
                             RunDir("trace-sim", root=tmp_path))
        result = run_trace(ectx, None)
        truth = {r["request_id"]: r for r in json.loads(urllib.request.urlopen(sim.url + "/sim/requests").read())}
    rows = sorted(ectx.run_dir.read_rows("trace_requests", "sim"), key=lambda r: r["trace_line"])
    trace = list(read_trace(iter(synthetic_lines(**SYNTH)), "mooncake", 512))
    assert len(rows) == len(trace) == SYNTH["requests"] and all(r["status"] == "ok" for r in rows)
    seen = [truth[r["request_id"]] for r in rows]
    first = rows[0]
    for row, t, s in zip(rows, trace, seen):
        sent_rel = t.arrival_s + row["lateness_s"] - first["lateness_s"]
        assert abs((s["arrival_ts"] - seen[0]["arrival_ts"]) - sent_rel) <= TOLERANCE_S, (row["trace_line"], s)
        assert s["prompt_tokens"] == t.input_tokens and s["completion_tokens"] == t.output_tokens
    # Hits exactly as a block cache holds the replayed prompts, in the order the simulator took them.
    salt = round_salt(cfg.scenarios.trace.seed, "trace-sim", 1)
    order = sorted(range(len(rows)), key=lambda i: seen[i]["admit_ts"])
    expected = _hits([prompt_token_ids(trace[i], salt, 512) for i in order])
    assert [seen[i]["cached_tokens"] for i in order] == expected
    assert sum(expected) > 0.2 * sum(t.input_tokens for t in trace)  # the trace's sharing reached the cache
    # The round's server hit rate is the simulator's counters over the round: its hits over its queries.
    (rnd,) = result["rounds"]
    assert rnd["server_hits_delta"] == sum(expected)
    assert rnd["server_queries_delta"] == sum(t.input_tokens for t in trace)
    assert rnd["expected_reuse"] is not None and 0 < rnd["expected_reuse"] <= rnd["server_hit_rate"]
    # The engine's own TTFT and ITL histograms over the round stand beside the client's (engine_rounds).
    (engine_round,) = ectx.run_dir.read_rows("engine_rounds", "sim")
    assert (engine_round["scenario"], engine_round["round"]) == ("trace", 1)
    assert engine_round["server_requests"] == len(trace) and engine_round["timing_gap_unpublished"] is None
    assert engine_round["client_ttft_mean_s"] is not None and engine_round["server_itl_mean_s"] is not None
    assert engine_round["ttft_gap_s"] is not None and engine_round["itl_gap_s"] is not None
