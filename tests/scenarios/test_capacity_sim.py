"""Capacity under SLO on the simulator: a planted capacity is found within one step, and every
probe's rounds are kept as rows (PROTOCOL.md section 8, "Capacity under SLO")."""

from __future__ import annotations

from tasks.state import documents as run_documents
from tasks.report import build_summary
from tasks.scenarios.capacity import run_capacity
from tasks.state.tables import to_frame
from tasks.publish.validate import validate_frames

PLANTED = 12


def test_a_planted_capacity_is_found_within_one_step(capacity_ctx):
    # Beyond 12 running requests every decode step is 3x slower: TPOT 30 ms against a 20 ms SLO.
    with capacity_ctx({"decode_knee": PLANTED}, {"start": 5, "max": 32, "step": 1, "rounds": 2, "extra_rounds": 1,
                                                  "requests_per_round": 36}, warmup=True) as (_, ctx):
        result = run_capacity(ctx)
    assert result["outcome"] == "found", result["text"]
    assert abs(result["capacity"] - PLANTED) <= 1, [(p["load"], p["goodput_share"]) for p in result["probes"]]
    low, high = result["bracket"]
    assert low == result["capacity"] and high - low <= 1
    loads = [p["load"] for p in result["probes"]]
    assert loads == [5, 10, 20, 15, 12, 13]  # doubling from start until a probe fails, then bisecting
    assert [p["phase"] for p in result["probes"]] == ["bracket"] * 3 + ["bisect"] * 3
    for p in result["probes"]:
        assert p["verdict"] == ("pass" if p["load"] <= PLANTED else "fail"), p
        assert p["ci_low"] <= p["goodput_share"] <= p["ci_high"]

    # Each probe's rounds are rows of the requests and rounds tables, scenario "capacity".
    rounds = [r for r in ctx.run_dir.read_rows("rounds", "sim") if r["scenario"] == "capacity"]
    measured = [r for r in rounds if not r["warmup"]]
    for p in result["probes"]:
        mine = sorted(r["round"] for r in measured if r["concurrency"] == p["load"])
        assert mine == list(range(1, p["rounds"] + 1)), (p["load"], mine)
    # A new shape's first round (its compile costs) is a warmup round, never judged.
    assert {r["concurrency"] for r in rounds if r["warmup"]} == set(loads)
    assert not any(r["first_encounter"] for r in measured)
    requests = ctx.run_dir.read_rows("requests", "sim")
    assert len([r for r in requests if r["scenario"] == "capacity" and r["round"] > 0]) == sum(
        p["requests"] for p in result["probes"])

    # One row per probe in the capacity table, valid against its suite.
    rows = ctx.run_dir.read_rows("capacity", "sim")
    assert [r["probe"] for r in rows] == list(range(1, len(loads) + 1))
    assert [r["concurrency"] for r in rows] == loads
    frames = {name: to_frame(name, ctx.run_dir.read_rows(name, "sim")) for name in ("capacity", "rounds", "requests")}
    results = validate_frames(frames)
    assert all(r["success"] for r in results.values()), results

    # The search's own streams show the engine streams: its capacity, judged on TPOT, is published.
    ctx.run_dir.write_json(run_documents.perf_summary_doc("sim", "capacity"), result)
    summary = build_summary(ctx.run_dir, ctx.config).engines["sim"]
    assert summary.ttft_published and summary.capacity.capacity == result["capacity"]
    assert summary.capacity.withheld is None


def test_an_engine_that_never_fails_reports_at_least_max(capacity_ctx):
    with capacity_ctx({}, {"start": 2, "max": 8, "rounds": 1, "extra_rounds": 0, "requests_per_round": 16}) as (_, ctx):
        result = run_capacity(ctx)
    assert result["outcome"] == "at_least_max" and result["capacity"] == 8
    assert [p["load"] for p in result["probes"]] == [2, 4, 8] and result["bracket"] == [8, None]
    assert "at least 8" in result["text"]


def test_an_engine_that_never_passes_reports_below_start(capacity_ctx):
    # Every step 10x slower from the first request on (100 ms gaps): nothing meets the 20 ms TPOT SLO. (A knee
    # of 1 let a request that ran alone for a while, its partner late on a loaded machine, meet it.) TPOT spans
    # the first token to the last, so a client that read the first token late shortens it: at 3x (30 ms gaps of
    # 8 tokens) a 70 ms stall passed one request of 32 in a CI-like run; at 10x a stall must pass 560 ms.
    with capacity_ctx({"decode_knee": 0, "decode_knee_factor": 10.0}, {"start": 2, "max": 16, "rounds": 2,
                                                                       "requests_per_round": 16,
                                                                       "output_tokens": 8}) as (_, ctx):
        result = run_capacity(ctx)
    assert result["outcome"] == "below_start" and result["capacity"] is None
    [probe] = result["probes"]
    assert probe["load"] == 2 and probe["goodput_share"] == 0 and probe["verdict"] == "fail"
    assert probe["rounds"] == 2 and probe["decided_by"] == "interval"  # 0 of 32: no extra rounds needed
    assert "below the start" in result["text"]
    rows = ctx.run_dir.read_rows("capacity", "sim")
    assert len(rows) == 1 and rows[0]["requests_good"] == 0 and rows[0]["requests"] == 32


def test_a_rate_search_probes_poisson_arrivals(capacity_ctx):
    with capacity_ctx({}, {"mode": "rate", "start": 8, "max": 16, "step": 0.5, "rounds": 1, "extra_rounds": 0,
                           "requests_per_round": 12}, slo={"e2e_s": 2.0}) as (_, ctx):
        result = run_capacity(ctx)
    assert result["outcome"] == "at_least_max" and [p["load"] for p in result["probes"]] == [8.0, 16.0]
    rounds = [r for r in ctx.run_dir.read_rows("rounds", "sim") if r["scenario"] == "capacity" and not r["warmup"]]
    assert sorted(r["rate_rps"] for r in rounds) == [8.0, 16.0]
    assert [r["rate_rps"] for r in ctx.run_dir.read_rows("capacity", "sim")] == [8.0, 16.0]
