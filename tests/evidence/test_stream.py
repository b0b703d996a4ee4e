"""The evidence client's stream reader against the simulator: timing fields, reassembly, and
faults reported as errors, never as a silent pass."""

from __future__ import annotations

import httpx

from tasks.engines import adapter_for
from tasks.engines.stream import stream_post

BODY = {"model": "dayone-sim-model", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 12,
        "stream_options": {"include_usage": True}}


def _one_stream(sim_ctx, profile, dialect="sglang", body=BODY):
    with sim_ctx(dialect, profile) as (sim, ctx), httpx.Client(timeout=10) as client:
        result = stream_post(client, sim.url + "/v1/chat/completions", body, adapter_for(dialect))
        truth = sim.requests()[-1]
    return result, truth


def test_a_clean_stream_is_read_whole_with_its_timings(sim_ctx):
    s, truth = _one_stream(sim_ctx, {"reasoning": True}, "vllm")
    assert s.ok and s.done and s.error is None
    assert s.usage["completion_tokens"] == truth["completion_tokens"]
    assert s.reasoning and s.content  # reasoning read from vLLM's `reasoning` field
    assert 0 < s.first_event_s <= s.ttft_s <= s.e2e_s
    assert len(s.output_events) == truth["completion_tokens"]  # one token per event on this profile


def test_a_stream_cut_before_done_is_an_error(sim_ctx):
    s, _ = _one_stream(sim_ctx, {"faults": {"cut_stream_every_nth": 1}})
    assert not s.ok and not s.done and "[DONE]" in s.error


def test_a_malformed_event_is_an_error(sim_ctx):
    s, _ = _one_stream(sim_ctx, {"faults": {"malformed_sse_every_nth": 1}})
    assert not s.ok and "malformed SSE" in s.error


def test_an_http_error_keeps_status_and_body(sim_ctx):
    too_long = {**BODY, "messages": [{"role": "user", "content": "word " * 5000}]}  # over the 4,096 limit
    s, _ = _one_stream(sim_ctx, {}, body=too_long)
    assert s.status is not None and s.status >= 400 and s.error.startswith("HTTP") and s.body_excerpt
