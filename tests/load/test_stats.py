"""Load statistics: one test per promise of PROTOCOL.md sections 3 and 5."""

import math

import pytest

from tasks.config.thresholds import SLO
from tasks.stats import figures as stats


def test_median_of_rounds_matches_the_seed_report():
    # The GLM-5.3-Flash Day 1 Hands-on report's vLLM concurrency-32 output TPS rounds.
    assert stats.median([1145.4, 1156.9, 1166.4]) == pytest.approx(1156.9)
    assert stats.median([1166.4, 1145.4, 1156.9]) == pytest.approx(1156.9)


def test_percentiles_use_linear_interpolation():
    xs = [1.0, 2.0, 3.0, 4.0]
    # position (n-1)*p/100: p90 -> 2.7 -> 3 + 0.7*(4-3)
    assert stats.percentile(xs, 90) == pytest.approx(3.7)
    assert stats.percentile(xs, 50) == pytest.approx(2.5)
    assert stats.percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    assert stats.percentile([5.0], 99) == 5.0
    assert stats.percentile([], 50) is None


def test_percentiles_agree_with_numpy_linear():
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(7)
    xs = list(rng.exponential(0.01, size=257))
    for p in (50, 90, 95, 99):
        assert stats.percentile(xs, p) == pytest.approx(float(np.percentile(xs, p, method="linear")))


def test_summary_has_every_percentile_and_skips_missing_values():
    s = stats.summarize([0.1, None, 0.3, float("nan"), 0.2])
    assert list(s) == ["p50", "p90", "p95", "p99", "max", "mean"]
    assert s["p50"] == pytest.approx(0.2)
    assert s["max"] == pytest.approx(0.3)
    assert s["mean"] == pytest.approx(0.2)
    assert all(v is None for v in stats.summarize([]).values())


def test_spread_above_a_quarter_of_the_median_is_flagged():
    assert not stats.spread_flag([1145.4, 1156.9, 1166.4])
    # the Day 1 Hands-on report's vLLM concurrency-8 rounds: 162.2 / 410.8 / 257.2
    assert stats.spread_flag([162.2, 410.8, 257.2])
    assert not stats.spread_flag([100.0])


def test_tpot_needs_more_than_one_token():
    assert stats.tpot(1.1, 0.1, 201) == pytest.approx(0.005)
    assert stats.tpot(1.1, 0.1, 1) is None
    assert stats.tpot(1.1, 0.1, None) is None


def _req(status="ok", ttft=0.1, tpot=0.01, e2e=1.0, send=100.0, tokens=64, itl=(0.01, 0.02)):
    return {
        "status": status, "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "send_ts": send,
        "completion_tokens": tokens, "itl_s": list(itl), "length_deviation": False,
    }


def test_goodput_counts_only_requests_within_every_slo():
    reqs = [_req(ttft=0.1), _req(ttft=0.5), _req(status="error", ttft=None), _req(tpot=0.2)]
    slo = SLO(ttft_s=0.2, tpot_s=0.05)
    assert stats.goodput_rps(reqs, 2.0, slo) == pytest.approx(0.5)
    assert stats.goodput_rps(reqs, 2.0, {"e2e_s": 0.5}) == 0.0
    assert stats.goodput_rps(reqs, 2.0, None) == pytest.approx(1.5)  # no SLO: every completed request


def test_round_figures_pool_gaps_and_fail_above_the_error_rate():
    reqs = [_req(send=100.0, e2e=1.0), _req(send=100.5, e2e=1.5, itl=(0.03,)), _req(status="error", e2e=None)]
    fig = stats.round_figures(reqs, None, error_rate_max=0.05)
    assert fig["duration_s"] == pytest.approx(2.0)
    assert fig["output_tps"] == pytest.approx(128 / 2.0)
    assert fig["requests_ok"] == 2 and fig["requests_failed"] == 1
    assert fig["status"] == "failed"
    assert fig["itl_max_s"] == pytest.approx(0.03)
    assert fig["itl_p50_s"] == pytest.approx(0.02)
    assert stats.round_figures(reqs, None, error_rate_max=0.5)["status"] == "ok"


def test_over_rounds_keeps_every_round_value_and_skips_warmup_and_failed():
    rounds = [
        {"round": 0, "warmup": True, "status": "ok", "output_tps": 1.0},
        {"round": 1, "status": "ok", "output_tps": 1145.4, "first_encounter": True, "ttft_p95_s": 9.0, "ttft_p99_s": 11.0},
        {"round": 2, "status": "ok", "output_tps": 1156.9},
        {"round": 3, "status": "ok", "output_tps": 1166.4},
        {"round": 4, "status": "failed", "output_tps": 5.0},
    ]
    out = stats.over_rounds(rounds, ["output_tps"])["output_tps"]
    assert out["median"] == pytest.approx(1156.9)
    assert out["rounds"] == [1145.4, 1156.9, 1166.4, None]
    assert out["spread"] is False
    fe = stats.first_encounter_tail(rounds)
    assert {k: fe[k] for k in ("round", "ttft_p95_s", "ttft_p99_s")} == {"round": 1, "ttft_p95_s": 9.0, "ttft_p99_s": 11.0}
    assert fe["source"] == "round 1" and fe["warmup"] is False
    assert stats.first_encounter_tail(rounds[2:]) is None
    assert not math.isnan(out["median"])


def test_first_encounter_taken_by_the_warmup_is_the_warmup_round_of_the_same_shape():
    shape = {"input_tokens": 128, "output_tokens": 64, "concurrency": 4, "rate_rps": None}
    other = {**shape, "concurrency": 8}
    warmup = [
        {**other, "round": 1, "warmup": True, "first_encounter": True, "ttft_p99_s": 7.0},
        {**shape, "round": 2, "warmup": True, "first_encounter": True, "ttft_p95_s": 3.0, "ttft_p99_s": 4.0,
         "e2e_p95_s": 5.0, "e2e_p99_s": 6.0},
    ]
    measured = [{**shape, "round": n, "status": "ok", "first_encounter": False, "ttft_p99_s": 0.1} for n in (1, 2, 3)]
    fe = stats.first_encounter_tail(measured, warmup)
    assert fe is not None and fe["warmup"] is True and fe["source"] == "warmup round 2"
    assert (fe["ttft_p95_s"], fe["ttft_p99_s"], fe["e2e_p95_s"], fe["e2e_p99_s"]) == (3.0, 4.0, 5.0, 6.0)
    assert stats.first_encounter_tail(measured, warmup[:1]) is None  # only another shape was warmed first
