"""Per-round engine figures read back from the simulator's /metrics, each held against what the
simulator planted or its ground truth (GET /sim/requests): preemptions planted by a profile, the
server's own TTFT, KV usage and queue, speculative decoding, for vLLM's and SGLang's dialects."""

from __future__ import annotations

import httpx
import pytest

from engine_rounds_helpers import context, engine_row, one_round
from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.load.plan import Shape
from tasks.scenarios.shared_prefix import run_shared_prefix
from tasks.state.storage import RunDir
from tasks.telemetry.engine_metrics import RoundWatch

SHAPE = Shape(input_tokens=128, output_tokens=32, concurrency=4)
REQUESTS = 12
BASE = {"itl_s": 0.01, "cache_capacity_tokens": 4096}


@pytest.mark.parametrize("dialect,word", [("vllm", "vllm:num_preemptions_total"),
                                          ("sglang", "sglang:num_retracted_requests_total")])
def test_preemptions_planted_by_the_profile_are_counted_in_their_round(sims, tmp_path, dialect, word):
    sim = sims(dialect, {**BASE, "preemption": {"every_nth": 3, "recompute_s": 0.05}})
    ctx = context(sim.url, dialect, tmp_path)
    one_round(ctx, SHAPE, REQUESTS)
    planted = sum(1 for r in sim.requests() if "preempted" in r["faults"])
    assert planted == REQUESTS // 3
    row = engine_row(ctx)
    assert row["preemption_metric"] == word
    assert row["preemptions"] == planted and row["preempted"] is True
    assert row["deltas_unpublished"] is None


def test_a_round_without_preemptions_is_not_flagged(sims, tmp_path):
    sim = sims("vllm", BASE)
    ctx = context(sim.url, "vllm", tmp_path)
    one_round(ctx, SHAPE, REQUESTS)
    row = engine_row(ctx)
    assert row["preemptions"] == 0 and row["preempted"] is False


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_server_ttft_queue_and_kv_usage_match_the_simulator(sims, tmp_path, dialect):
    sim = sims(dialect, {**BASE, "slots": 2})  # 4 streams on 2 slots: half of them queue
    ctx = context(sim.url, dialect, tmp_path)
    outcome = one_round(ctx, SHAPE, REQUESTS)
    truth = sim.requests()
    row = engine_row(ctx)
    assert row["server_requests"] == REQUESTS
    assert row["server_ttft_mean_s"] == pytest.approx(sum(r["ttft_s"] for r in truth) / REQUESTS, abs=1e-9)
    assert row["queue_time_mean_s"] == pytest.approx(sum(r["queue_wait_s"] for r in truth) / REQUESTS, abs=1e-9)
    assert row["queue_time_mean_s"] > 0.05  # two requests always wait for a slot
    assert row["client_ttft_mean_s"] == outcome.row["ttft_mean_s"]
    # Loopback: the client sees the first token within a few ms of the engine, so no finding. The bound
    # leaves a busy suite room: a 100 ms stall of the simulator as a wave of 4 arrives stamps their
    # arrival late, a third of that on the mean of 12 (10.1 ms seen); a quarter of the queued TTFT is more.
    assert 0 <= row["ttft_gap_s"] < 0.060 and row["ttft_gap_finding"] is None
    assert row["gauge_samples"] >= 3
    # Two running requests hold 128 + their tokens so far of 4,096: between 6% and 8%.
    assert 2 * 128 / 4096 <= row["kv_usage_peak"] <= 2 * (128 + 32) / 4096 + 1e-9
    assert row["running_peak"] == 2 and row["waiting_peak"] >= 1


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_speculative_decoding_acceptance_and_the_faster_tpot_it_buys(sims, tmp_path, dialect):
    plain = sims(dialect, BASE)
    plain_ctx = context(plain.url, dialect, tmp_path / "plain")
    spec = sims(dialect, {**BASE, "speculative": {"draft_tokens": 4, "acceptance_rate": 0.5}})
    ctx = context(spec.url, dialect, tmp_path / "spec")
    # Each engine's TPOT is the least of three rounds, the two engines' rounds interleaved: a loaded
    # machine only ever lengthens a simulator's 10 ms steps, and one slow round of the plain engine once
    # made it look 50% slower than it is (15.2 ms against a speculating engine's 3.3 ms).
    plain_tpots, tpots = [], []
    for round_ in (1, 2, 3):
        plain_tpots.append(one_round(plain_ctx, SHAPE, REQUESTS, round_).row["tpot_mean_s"])
        tpots.append(one_round(ctx, SHAPE, REQUESTS, round_).row["tpot_mean_s"])
    plain_tpot, tpot = min(plain_tpots), min(tpots)
    assert engine_row(plain_ctx)["spec_acceptance_rate"] is None  # no speculation: no figure, not 0
    row = engine_row(ctx)
    assert row["spec_acceptance_rate"] == pytest.approx(0.5)
    assert row["spec_mean_accepted_length"] == pytest.approx(3.0)  # 1 + 0.5 x 4
    if dialect == "vllm":
        assert row["spec_draft_tokens"] == pytest.approx(4 * row["spec_drafts"])
        assert row["spec_drafts"] == pytest.approx(REQUESTS * 32 / 3.0)
    # Three tokens per 10 ms step: TPOT about a third of the plain engine's.
    assert tpot == pytest.approx(plain_tpot / 3.0, rel=0.25)


def test_raw_scrapes_around_the_round_are_kept_as_server_metrics_rows(sims, tmp_path):
    sim = sims("vllm", BASE)
    ctx = context(sim.url, "vllm", tmp_path)
    one_round(ctx, SHAPE, REQUESTS)
    rows = ctx.run_dir.read_rows("server_metrics", "eng")
    assert {r["phase"] for r in rows} == {"before_round", "after_round"}
    after = {r["metric"]: r["value"] for r in rows if r["phase"] == "after_round"}
    before = {r["metric"]: r["value"] for r in rows if r["phase"] == "before_round"}
    assert after["vllm:time_to_first_token_seconds_count"] - before["vllm:time_to_first_token_seconds_count"] == REQUESTS
    row = engine_row(ctx)
    assert row["scrape_before_ts"] < min(r["arrival_ts"] for r in sim.requests())
    assert row["scrape_after_ts"] > max(r["last_event_ts"] for r in sim.requests())


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_the_clients_ttft_and_itl_stand_beside_the_engines_histograms_over_the_same_window(sims, tmp_path, dialect):
    sim = sims(dialect, BASE)
    ctx = context(sim.url, dialect, tmp_path)
    outcome = one_round(ctx, SHAPE, REQUESTS)
    truth = sim.requests()
    row = engine_row(ctx)
    outputs = [[t for t, kind in zip(r["event_ts"], r["event_kinds"]) if kind == "output"] for r in truth]
    gaps = [b - a for ts in outputs for a, b in zip(ts, ts[1:])]
    # The simulator's truth, its stamps as Unix times (a float's 0.2 us there).
    assert row["server_itl_mean_s"] == pytest.approx(sum(gaps) / len(gaps), abs=1e-6)
    assert row["client_itl_mean_s"] == outcome.row["itl_mean_s"]
    assert row["client_tpot_mean_s"] == outcome.row["tpot_mean_s"]
    assert row["client_ttft_p99_s"] == outcome.row["ttft_p99_s"]
    assert row["timing_gap_unpublished"] is None
    assert row["ttft_gap_s"] == pytest.approx(row["client_ttft_mean_s"] - row["server_ttft_mean_s"])
    assert row["itl_gap_s"] == pytest.approx(row["client_itl_mean_s"] - row["server_itl_mean_s"])
    assert row["tpot_gap_s"] == pytest.approx(row["client_tpot_mean_s"] - row["server_itl_mean_s"])
    assert row["client_e2e_mean_s"] == outcome.row["e2e_mean_s"]
    assert row["e2e_gap_s"] == pytest.approx(row["client_e2e_mean_s"] - row["server_e2e_mean_s"])
    assert -0.001 <= row["e2e_gap_s"] < 0.060  # the client's whole stream holds the engine's, as its TTFT does
    # Loopback: a token reaches the client a fraction of a ms after the engine stamped it, every token alike,
    # so the gaps between them agree far closer than the 10 ms steps (2 ms: a loaded suite's stall).
    assert abs(row["itl_gap_s"]) < 0.002 and row["itl_gap_finding"] is None
    assert -0.001 <= row["ttft_gap_s"] < 0.060  # a simulator stall as a wave arrives: a third of it (above)
    # 10 ms steps: the median and the tail fall in the histogram's (0.005, 0.01] or (0.01, 0.015] bucket.
    assert 0.005 <= row["server_itl_p50_s"] <= 0.015 and row["server_itl_p50_s"] <= row["server_itl_p99_s"] <= 0.025


def test_gaps_are_not_published_where_the_engine_timed_other_requests_in_the_window(sims, tmp_path):
    sim = sims("vllm", BASE)
    ctx = context(sim.url, "vllm", tmp_path)
    # A window around the round that also holds two requests of someone else's.
    outer = RoundWatch(sim.url, ctx.endpoint.adapter).start()
    for _ in range(2):
        httpx.post(sim.url + "/v1/completions", json={"model": ctx.endpoint.model, "prompt": "another client",
                                                      "max_tokens": 4}, timeout=30).raise_for_status()
    outcome = one_round(ctx, SHAPE, REQUESTS)
    row = outer.finish().row(ctx.endpoint.row_keys("short", 1), outcome.row)
    assert row["server_requests"] == REQUESTS + 2 and row["server_ttft_mean_s"] is not None
    assert row["client_ttft_mean_s"] == outcome.row["ttft_mean_s"]  # the client's own figures stay
    assert row["ttft_gap_s"] is None and row["itl_gap_s"] is None and row["tpot_gap_s"] is None
    assert row["ttft_gap_finding"] is None and row["itl_gap_finding"] is None
    assert row["timing_gap_unpublished"] == (
        f"the engine timed {REQUESTS + 2} first tokens in the round's window, the client sent {REQUESTS} requests: "
        "other traffic reached the engine, its histograms are not the client's requests")
    # The round's own window holds only its requests.
    assert engine_row(ctx)["timing_gap_unpublished"] is None


def test_every_shared_prefix_round_has_the_client_against_the_server(sims, tmp_path):
    # A traffic scenario's rounds go through the same RoundWatch as a performance round's: each has its row.
    sim = sims("vllm", BASE)
    settings = {"enabled": True, "groups": 2, "prefix_tokens": 64, "suffix_tokens": 16, "requests_per_group": 2,
                "output_tokens": 32, "concurrency": [2], "rounds": 2}  # 124 gaps a round: a 2 ms mean
    # holds a quarter second of a loaded client's late reads at the streams' ends (8 tokens held 56 ms)
    cfg = parse_run_config({"run_id": "engine-metrics", "engines": [{"name": "eng", "dialect": "vllm"}],
                            "scenarios": {"shared_prefix": settings, "warmup": False}})
    ctx = EngineContext(cfg, endpoint_for(cfg, "eng", sim.url, "sha256:" + "0" * 64), RunDir("engine-metrics",
                                                                                              root=tmp_path))
    run_shared_prefix(ctx)
    rows = [r for r in ctx.run_dir.read_rows("engine_rounds", "eng") if r["scenario"] == "shared_prefix"]
    assert sorted(r["round"] for r in rows) == [1, 2]
    for r in rows:
        assert r["server_requests"] == 4 and r["timing_gap_unpublished"] is None, r
        assert r["ttft_gap_s"] is not None and abs(r["itl_gap_s"]) < 0.002, r
