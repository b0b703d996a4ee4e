"""What the engine spent in a round, from two scrapes and the gauges read between them (pure arithmetic;
the exposition texts are the engines' own shapes: vLLM and SGLang as their collectors name them, llama.cpp
as xllamacpp 2026.10.11549 serves it with --metrics)."""

from __future__ import annotations

import pytest

from tasks.engines import adapter_for
from tasks.telemetry.engine_metrics import (GaugeStats, engine_round_row, histogram_quantile, parse_scrape, read_gauges,
                                           ttft_gap_finding)
from tasks.state.tables import to_frame

KEYS = {"run_id": "r", "engine": "e", "image_digest": None, "scenario": "short", "round": 1}
CLIENT = {"concurrency": 4, "rate_rps": None, "input_tokens": 128, "output_tokens": 32, "warmup": False}


def vllm_text(preemptions: float, ttft_sum: float, ttft_count: float, buckets: dict[str, float],
              drafts: float = 0, draft_tokens: float = 0, accepted: float = 0) -> str:
    lines = [
        "# TYPE vllm:num_preemptions_total counter",
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {preemptions}',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0',
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}',
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    lines += [f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",model_name="m"}} {n}'
              for le, n in buckets.items()]
    lines += [f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="m"}} {ttft_sum}',
              f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {ttft_count}']
    return "\n".join(lines) + "\n"


LLAMACPP = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {prompt}
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total {draft_tokens}
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total {accepted}
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total {drafts}
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""


def test_preemptions_are_the_counter_delta_over_the_round_and_flag_it():
    before = parse_scrape(vllm_text(5, 1.0, 10, {"0.1": 10, "+Inf": 10}))
    after = parse_scrape(vllm_text(8, 2.0, 20, {"0.1": 20, "+Inf": 20}))
    row = engine_round_row(adapter_for("vllm"), KEYS, before, after, GaugeStats(), CLIENT)
    assert row["preemptions"] == 3 and row["preempted"] is True
    assert row["preemption_metric"] == "vllm:num_preemptions_total"
    quiet = engine_round_row(adapter_for("vllm"), KEYS, before, before, GaugeStats(), CLIENT)
    assert quiet["preemptions"] == 0 and quiet["preempted"] is False


def test_a_counter_that_fell_voids_every_delta_of_the_round_with_the_reason():
    before = parse_scrape(vllm_text(8, 2.0, 20, {"0.1": 20, "+Inf": 20}))
    after = parse_scrape(vllm_text(1, 0.1, 1, {"0.1": 1, "+Inf": 1}))  # the engine restarted
    row = engine_round_row(adapter_for("vllm"), KEYS, before, after, GaugeStats(), CLIENT)
    assert "vllm:num_preemptions_total fell from 8 to 1" in row["deltas_unpublished"]
    assert row["preemptions"] is None and row["preempted"] is None and row["server_ttft_mean_s"] is None


def test_server_ttft_is_the_histogram_mean_over_the_round_beside_the_client_mean():
    before = parse_scrape(vllm_text(0, 1.0, 10, {"0.02": 5, "0.04": 10, "+Inf": 10}))
    after = parse_scrape(vllm_text(0, 1.6, 30, {"0.02": 15, "0.04": 30, "+Inf": 30}))
    row = engine_round_row(adapter_for("vllm"), KEYS, before, after, GaugeStats(), {**CLIENT, "ttft_mean_s": 0.12})
    assert row["server_ttft_mean_s"] == pytest.approx(0.6 / 20)
    assert row["server_requests"] == 20
    assert row["server_ttft_p50_s"] == pytest.approx(0.02)  # 10 of 20 in the first bucket
    assert row["client_ttft_mean_s"] == 0.12 and row["ttft_gap_s"] == pytest.approx(0.09)
    assert "120.0 ms" in row["ttft_gap_finding"] and "30.0 ms" in row["ttft_gap_finding"]


def test_a_small_ttft_gap_is_not_a_finding():
    assert ttft_gap_finding(0.0305, 0.030) is None  # 0.5 ms: loopback and parsing
    assert ttft_gap_finding(1.10, 1.00) is None  # 100 ms but 10% of a long prefill
    assert ttft_gap_finding(None, 0.03) is None
    finding = ttft_gap_finding(0.080, 0.030)
    assert finding is not None and "80.0 ms" in finding and "30.0 ms" in finding and "+167%" in finding


def test_histogram_quantile_interpolates_inside_the_bucket_of_the_round_only():
    before = [(0.1, 100.0), (0.2, 100.0), (float("inf"), 100.0)]  # earlier rounds, all fast
    after = [(0.1, 100.0), (0.2, 110.0), (float("inf"), 110.0)]  # this round: 10 between 0.1 and 0.2
    assert histogram_quantile(0.5, before, after) == pytest.approx(0.15)
    assert histogram_quantile(0.5, before, before) is None
    assert histogram_quantile(0.99, [], [(0.1, 1.0), (float("inf"), 2.0)]) == pytest.approx(0.1)  # in +Inf


def test_speculative_acceptance_from_vllm_counters():
    before = parse_scrape(vllm_text(0, 0, 0, {"+Inf": 0}, drafts=10, draft_tokens=40, accepted=20))
    after = parse_scrape(vllm_text(0, 0, 0, {"+Inf": 0}, drafts=110, draft_tokens=440, accepted=170))
    row = engine_round_row(adapter_for("vllm"), KEYS, before, after, GaugeStats(), CLIENT)
    assert row["spec_acceptance_rate"] == pytest.approx(150 / 400)
    assert row["spec_mean_accepted_length"] == pytest.approx(1 + 150 / 100)


def test_llamacpp_speculative_counters_and_what_it_does_not_expose():
    text = lambda **v: LLAMACPP.format(**{"prompt": 0, "drafts": 0, "draft_tokens": 0, "accepted": 0, **v})  # noqa: E731
    adapter = adapter_for("llamacpp")
    gauges = GaugeStats()
    gauges.add({"llamacpp:requests_deferred": 3.0, "llamacpp:requests_processing": 1.0})
    row = engine_round_row(adapter, KEYS, parse_scrape(text()), parse_scrape(text(prompt=64)), gauges, CLIENT)
    assert row["waiting_peak"] == 3.0 and row["running_peak"] == 1.0
    assert row["spec_acceptance_rate"] is None  # no draft model: no drafts, not a rate of 0
    assert {"preemptions", "kv_usage_peak", "server_ttft", "queue_time"} <= set(row["not_exposed"])
    spec = engine_round_row(adapter, KEYS, parse_scrape(text()),
                            parse_scrape(text(drafts=8, draft_tokens=32, accepted=24)), gauges, CLIENT)
    assert spec["spec_acceptance_rate"] == 0.75 and spec["spec_mean_accepted_length"] == 4.0


def test_sglang_acceptance_comes_from_its_gauges_read_during_the_round():
    adapter = adapter_for("sglang")
    empty = parse_scrape("# TYPE sglang:num_retracted_requests_total counter\nsglang:num_retracted_requests_total 2\n")
    gauges = GaugeStats()
    for length, rate in ((0.0, 0.0), (2.8, 0.6), (3.2, 0.7)):  # 0 until the engine first set it
        gauges.add({"sglang:spec_accept_length": length, "sglang:spec_accept_rate": rate})
    row = engine_round_row(adapter, KEYS, empty, empty, gauges, CLIENT)
    assert row["spec_mean_accepted_length"] == pytest.approx(3.0)
    assert row["spec_acceptance_rate"] == pytest.approx(0.65)
    assert row["preemption_metric"] == "sglang:num_retracted_requests_total" and row["preemptions"] == 0


def test_no_metrics_endpoint_is_said_not_guessed():
    row = engine_round_row(adapter_for("vllm"), KEYS, None, None, GaugeStats(), CLIENT)
    assert row["deltas_unpublished"] == "/metrics could not be read before and after the round"
    assert row["preemptions"] is None and row["spec_acceptance_rate"] is None


def test_gauges_are_summed_over_labels_by_a_line_scan():
    text = ('# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0"} 0.25\n'
            'vllm:kv_cache_usage_perc{engine="1"} 0.5\nvllm:kv_cache_usage_perc_other 9\n')
    assert read_gauges(text, ("vllm:kv_cache_usage_perc",)) == {"vllm:kv_cache_usage_perc": 0.75}


def test_rows_fit_the_engine_rounds_schema():
    before = parse_scrape(vllm_text(0, 1.0, 10, {"0.1": 10, "+Inf": 10}))
    rows = [engine_round_row(adapter_for(d), KEYS, before, before, GaugeStats(), CLIENT)
            for d in ("vllm", "sglang", "llamacpp")]
    frame = to_frame("engine_rounds", rows)
    assert len(frame) == 3 and frame["not_exposed"].notna().all()
