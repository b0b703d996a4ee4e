"""Prometheus text parsed with prometheus_client, keyed by sample names as exposed."""

from __future__ import annotations

import httpx

from tasks.engines import adapter_for
from tasks.telemetry.metrics import parse_samples, sample_rows, scrape, scrape_samples, sum_over_labels

TEXT = """# HELP sglang:prompt_tokens_total Prompt tokens.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m",tp_rank="0"} 100.0
sglang:prompt_tokens_total{model_name="m",tp_rank="1"} 50.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0"} 7.0
vllm:prefix_cache_hits_created{engine="0"} 1.7e9
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="m"} 0.98
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="1.0"} 2.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 3.0
vllm:e2e_request_latency_seconds_sum 2.5
vllm:e2e_request_latency_seconds_count 3.0
"""


def test_counters_keep_their_total_suffix_and_sum_over_labels():
    values = sum_over_labels(parse_samples(TEXT))
    assert values["sglang:prompt_tokens_total"] == 150.0
    # TYPE line without _total: prometheus_client files the samples under "unknown"; still read
    assert values["vllm:prefix_cache_hits_total"] == 7.0
    assert values["sglang:cache_hit_rate"] == 0.98
    assert values["vllm:e2e_request_latency_seconds_count"] == 3.0
    assert not any(k.endswith(("_created", "_bucket")) for k in values)
    assert "sglang:prompt_tokens" not in values  # the family name is not a key


def test_rows_carry_each_sample_with_labels_and_phase():
    rows = sample_rows({"run_id": "r", "engine": "e"}, "before_trial_0", parse_samples(TEXT), scrape_ts=5.0)
    prompt = [r for r in rows if r["metric"] == "sglang:prompt_tokens_total"]
    assert [r["labels"]["tp_rank"] for r in prompt] == ["0", "1"]
    assert all(r["phase"] == "before_trial_0" and r["scrape_ts"] == 5.0 for r in rows)


def test_scrape_reads_the_simulators_dialect_counters(sim_ctx):
    for dialect in ("sglang", "vllm"):
        with sim_ctx(dialect) as (_, ctx), httpx.Client() as client:
            adapter = adapter_for(dialect)
            for _ in range(2):  # a cache hit: SGLang's hit counter is absent until its first increment
                client.post(ctx.endpoint.base_url + "/v1/completions", json={"prompt": "x " * 40, "max_tokens": 1})
            values = scrape(client, ctx.endpoint.base_url, adapter)
            assert {adapter.cache_counters.queries, adapter.cache_counters.hits} <= set(values)
            assert scrape_samples(client, ctx.endpoint.base_url, adapter)
