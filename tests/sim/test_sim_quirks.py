"""Reasoning in each dialect's field, and every API quirk, shown against the ground truth."""

from __future__ import annotations

import httpx
import pytest
from sim_helpers import chat, stream

from tasks.sim.tokenizer import count_tokens

FAST = {"itl_s": 0.001, "ttft_base_s": 0.002}


@pytest.mark.parametrize("dialect,field", [("sglang", "reasoning_content"), ("vllm", "reasoning"), ("openai", None)])
def test_reasoning_streams_before_content_in_the_dialect_field(sims, dialect, field):
    sim = sims(dialect, {**FAST, "reasoning": True, "reasoning_tokens": 5})
    message = httpx.post(sim.url + "/v1/chat/completions", json=chat("think", max_tokens=12, ignore_eos=True)).json()
    message = message["choices"][0]["message"]
    s = stream(sim.url, "/v1/chat/completions", chat("think", max_tokens=12, ignore_eos=True))
    kinds = [("r" if d.get(field) else "c") for d in s.deltas() if (field and d.get(field)) or d.get("content")]
    if field is None:  # a generic server has no reasoning field: content only
        assert "reasoning" not in message and "reasoning_content" not in message and set(kinds) == {"c"}
        return
    assert count_tokens(message[field]) == 5 and count_tokens(message["content"]) == 7
    assert kinds == ["r"] * 5 + ["c"] * 7
    other = {"reasoning", "reasoning_content"} - {field}
    assert not any(d.get(name) for d in s.deltas() for name in other)


def test_quirk_reasoning_left_inline_in_the_content(sims):
    sim = sims("sglang", {**FAST, "reasoning": True, "reasoning_tokens": 3, "quirks": {"reasoning_inline": True}})
    message = httpx.post(sim.url + "/v1/chat/completions", json=chat("think", max_tokens=8)).json()["choices"][0]["message"]
    assert message["content"].startswith("<think>") and "</think>" in message["content"]
    assert not message.get("reasoning_content")
    s = stream(sim.url, "/v1/chat/completions", chat("think", max_tokens=8), "inline")
    text = s.field("content")
    assert text.startswith("<think>") and "</think>" in text and not s.field("reasoning_content")
    assert "reasoning_inline" in sim.requests("inline")[0]["quirks"]


def test_quirk_echo_false_ignored(sims):
    sim = sims("vllm", {**FAST, "quirks": {"echo_ignored": True}})
    body = {"prompt": "The prompt itself", "max_tokens": 3, "echo": False}
    r = httpx.post(sim.url + "/v1/completions", json=body, headers={"X-Request-Id": "e1"})
    assert r.json()["choices"][0]["text"].startswith("The prompt itself")
    s = stream(sim.url, "/v1/completions", body, "e2")
    assert "".join(s.texts()).startswith("The prompt itself")
    assert all("echo_ignored" in sim.requests(i)[0]["quirks"] for i in ("e1", "e2"))


def test_quirk_some_streams_never_stream(sims):
    sim = sims("vllm", {**FAST, "quirks": {"unstreamed_every_nth": 2}})
    body = chat("stream", max_tokens=10, ignore_eos=True)
    normal = stream(sim.url, "/v1/chat/completions", body, "u1")
    batched = stream(sim.url, "/v1/chat/completions", body, "u2")
    contents = [d.get("content") for d in batched.deltas()]
    assert all(c == "" for c in contents[:-1]) and count_tokens(contents[-1]) == 10
    assert sum(1 for d in normal.deltas() if d.get("content")) == 10
    assert sim.requests("u2")[0]["quirks"] == ["unstreamed"] and sim.requests("u1")[0]["quirks"] == []


def test_quirk_usage_missing_from_streams(sims):
    sim = sims("sglang", {**FAST, "quirks": {"usage_missing": True}})
    s = stream(sim.url, "/v1/chat/completions", chat("usage?", max_tokens=3, stream_options={"include_usage": True}), "um")
    assert s.done and s.usage() is None
    assert "usage_missing" in sim.requests("um")[0]["quirks"]


@pytest.mark.parametrize("dialect,standard", [("sglang", ("sglang:prompt_tokens_total", "sglang:cached_tokens_total")),
                                              ("vllm", ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"))])
def test_quirk_metric_counters_absent_or_renamed(sims, dialect, standard):
    absent = sims(dialect, {**FAST, "quirks": {"metrics": "absent"}})
    renamed = sims(dialect, {**FAST, "quirks": {"metrics": "renamed"}})
    for sim in (absent, renamed):
        for _ in range(2):  # a hit too: SGLang's counters appear at their first increment
            httpx.post(sim.url + "/v1/completions", json={"prompt": "x " * 40, "max_tokens": 1})
    absent_text = httpx.get(absent.url + "/metrics").text
    renamed_text = httpx.get(renamed.url + "/metrics").text
    assert "time_to_first_token_seconds" in absent_text  # the endpoint still serves other metrics
    for name in standard:
        assert name not in absent_text and name not in renamed_text
    assert ("cache_hit_tokens_total" if dialect == "sglang" else "vllm:gpu_prefix_cache_hits_total") in renamed_text


def test_seed_profiles_load_and_the_vllm_preview_shows_its_traps(sims):
    from pathlib import Path

    from tasks.config.sim_profile import load_profile

    folder = Path(__file__).resolve().parents[2] / "tasks" / "sim" / "profiles"
    profiles = {f.stem: load_profile(f) for f in folder.glob("*.yaml")}
    assert {"seed-sglang", "seed-vllm-preview"} <= set(profiles)
    preview = profiles["seed-vllm-preview"].model_dump()
    sim = sims("vllm", {**preview, "startup_delay_s": 0, "jit_delay_s": 0})
    echoed = httpx.post(sim.url + "/v1/completions", json={"prompt": "Echo me", "max_tokens": 2, "echo": False}).json()
    assert echoed["choices"][0]["text"].startswith("Echo me")
    message = httpx.post(sim.url + "/v1/chat/completions", json=chat("why?", max_tokens=20)).json()["choices"][0]["message"]
    assert "<think>" in message["content"] and not message.get("reasoning")
    streams = [stream(sim.url, "/v1/chat/completions", chat("go", max_tokens=20)) for _ in range(3)]
    assert sum(sum(1 for d in s.deltas() if d.get("content")) == 1 for s in streams) == 1  # one unstreamed
