"""PROTOCOL.md section 5's prefix-cache verdict, and the GLM-5.3-Flash Day 1 Hands-on
report's figures reproduced exactly."""

from __future__ import annotations

import pytest

from tasks.engines import adapter_for
from tasks.evidence.cache import cache_verdict, ttft_decrease


def test_seed_vllm_hit_rate_from_counter_deltas_is_65_28_percent():
    # The Day 1 Hands-on report: query tokens +26,472 and hit tokens +17,280 over the trial -> about 65.28%.
    before = {"vllm:prefix_cache_queries_total": 1000.0, "vllm:prefix_cache_hits_total": 200.0}
    after = {"vllm:prefix_cache_queries_total": 27472.0, "vllm:prefix_cache_hits_total": 17480.0}
    rate = adapter_for("vllm").hit_rate(before, after)
    assert (rate.queries_delta, rate.hits_delta) == (26472.0, 17280.0)
    assert f"{rate.rate:.2%}" == "65.28%"
    assert round(rate.rate * 100, 2) == 65.28


def test_seed_sglang_ttft_decrease_is_56_6_percent():
    # The Day 1 Hands-on report: cold TTFT 456.7 ms, hot median 198.2 ms -> a 56.6% decrease.
    decrease = ttft_decrease(0.4567, [0.2001, 0.1982, 0.1950, 0.1990, 0.1975])
    assert f"{decrease:.1%}" == "56.6%"
    assert round(decrease * 100, 1) == 56.6


def test_sglang_hit_rate_uses_its_counters_not_the_last_value_gauge():
    before = {"sglang:prompt_tokens_total": 0.0, "sglang:cached_tokens_total": 0.0, "sglang:cache_hit_rate": 0.0}
    after = {"sglang:prompt_tokens_total": 24000.0, "sglang:cached_tokens_total": 19712.0,
             "sglang:cache_hit_rate": 0.9855}
    assert adapter_for("sglang").hit_rate(before, after).rate == pytest.approx(19712 / 24000)


def test_effective_needs_both_the_ttft_fall_and_the_server_hit_rate():
    both = cache_verdict(0.4567, [0.1982] * 5, 17280 / 26472)
    assert both.verdict == "effective"
    assert both.as_dict()["hot_ttft_median_s"] == 0.1982


def test_a_faster_client_without_server_hits_is_unconfirmed():
    v = cache_verdict(0.4567, [0.1982] * 5, 0.10)
    assert v.verdict == "unconfirmed" and "10.00%" in v.reason and "50%" in v.reason


def test_server_hits_without_a_ttft_fall_are_unconfirmed():
    v = cache_verdict(0.4567, [0.40] * 5, 0.9)
    assert v.verdict == "unconfirmed" and "12.4%" in v.reason and "30%" in v.reason


def test_missing_counters_are_named_in_the_reason():
    v = cache_verdict(0.4567, [0.1982] * 5, None, "the counters vllm:prefix_cache_hits_total are not exposed")
    assert v.verdict == "unconfirmed" and "vllm:prefix_cache_hits_total" in v.reason
    assert v.hit_rate is None and v.ttft_decrease == pytest.approx(0.566, abs=1e-3)


def test_thresholds_are_inclusive():
    assert cache_verdict(1.0, [0.7], 0.5).verdict == "effective"
    assert cache_verdict(1.0, [0.7001], 0.5).verdict == "unconfirmed"
    assert cache_verdict(1.0, [0.7], 0.4999).verdict == "unconfirmed"


def test_no_cold_ttft_is_unconfirmed_not_an_error():
    v = cache_verdict(None, [0.2], 0.9)
    assert v.verdict == "unconfirmed" and "cold" in v.reason
    with pytest.raises(ValueError, match="hot_ttfts_s"):
        ttft_decrease(0.5, [])
