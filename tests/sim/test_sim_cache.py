"""Prefix cache: exact dialect counters, usage cached_tokens, the clear endpoints, capacity."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from sim_helpers import chat

COUNTERS = {"sglang": ("sglang:prompt_tokens_total", "sglang:cached_tokens_total"),
            "vllm": ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")}
CLEAR = {"sglang": "/flush_cache", "vllm": "/reset_prefix_cache"}


def scrape(url: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        m = re.match(r"^([a-zA-Z_:][\w:]*)(?:\{[^}]*\})? (\S+)$", line)
        if m:
            values[m.group(1)] = values.get(m.group(1), 0.0) + float(m.group(2))
    return values


@pytest.mark.parametrize("dialect", ["sglang", "vllm"])
def test_cold_then_five_repeats_counts_exactly_and_clear_empties_it(sims, dialect):
    sim = sims(dialect, {"ttft_base_s": 0.002, "prefill_tokens_per_s": 20_000, "itl_s": 0.001, "dev_mode": True})
    queries, hits = COUNTERS[dialect]
    prompt = " ".join(f"w{i % 997}" for i in range(4400))
    before = scrape(sim.url)
    usages = []
    for i in range(6):
        r = httpx.post(sim.url + "/v1/chat/completions", json=chat(prompt, max_tokens=4),
                       headers={"X-Request-Id": f"trial-{i}"}, timeout=30)
        usages.append(r.json()["usage"])
    after = scrape(sim.url)
    prompt_tokens = usages[0]["prompt_tokens"]
    cacheable = (prompt_tokens - 1) // 16 * 16
    # SGLang's counters are absent until their first increment, its usage names cached tokens only above 0
    assert after[queries] - before.get(queries, 0.0) == 6 * prompt_tokens
    assert after[hits] - before.get(hits, 0.0) == 5 * cacheable
    assert [(u.get("prompt_tokens_details") or {}).get("cached_tokens", 0) for u in usages] == [0] + [cacheable] * 5
    rows = sim.requests()
    assert [r["cached_tokens"] for r in rows] == [0] + [cacheable] * 5
    assert min(r["ttft_s"] for r in rows[1:]) < rows[0]["ttft_s"] * 0.7

    assert httpx.post(sim.url + CLEAR[dialect]).status_code == 200
    httpx.post(sim.url + "/v1/chat/completions", json=chat(prompt, max_tokens=4), headers={"X-Request-Id": "after-clear"})
    assert sim.requests("after-clear")[0]["cached_tokens"] == 0


def test_vllm_reset_prefix_cache_only_in_dev_mode(sims):
    sim = sims("vllm", {})
    assert httpx.post(sim.url + "/reset_prefix_cache").status_code == 404


def test_sglang_flush_refused_while_requests_run(sims):
    sim = sims("sglang", {"itl_s": 0.02})
    busy = _while_one_request_runs(sim, lambda: httpx.post(sim.url + "/flush_cache"))
    assert busy.status_code == 400
    assert httpx.post(sim.url + "/flush_cache").status_code == 200


def test_capacity_evicts_least_recently_used_and_switch_off(sims):
    sim = sims("vllm", {"cache_capacity_tokens": 160, "itl_s": 0.001})  # 10 blocks
    a, b = list(range(0, 97)), list(range(1000, 1097))  # 6 blocks each
    for request_id, prompt in (("a1", a), ("b1", b), ("a2", a)):
        httpx.post(sim.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 1}, headers={"X-Request-Id": request_id})
    assert sim.requests("a2")[0]["cached_tokens"] == 0  # b pushed a's first blocks out
    off = sims("sglang", {"prefix_cache": False, "itl_s": 0.001})
    for request_id in ("x1", "x2"):
        httpx.post(off.url + "/v1/completions", json={"prompt": a, "max_tokens": 1}, headers={"X-Request-Id": request_id})
    assert off.requests("x2")[0]["cached_tokens"] == 0
    assert scrape(off.url).get("sglang:cached_tokens_total", 0.0) == 0  # absent until a first hit


def _while_one_request_runs(sim, action):
    """Run `action()` while a long completion is running on `sim`; return what it returned.

    Waits on the clock, not a count of polls: on a loaded machine the request can take
    a while to reach the simulator, and acting before it runs tests nothing. The request
    streams for 10 s, so that a stall of a second cannot end it before the action; it is
    closed after the action, and the simulator left idle."""
    body = {"prompt": "long running", "max_tokens": 500, "ignore_eos": True, "stream": True}  # 500 x 20 ms
    with httpx.stream("POST", sim.url + "/v1/completions", json=body, timeout=30):
        deadline = time.monotonic() + 20
        while not httpx.get(sim.url + "/sim/state").json()["running"]:
            assert time.monotonic() < deadline, "the long request never started running on the simulator"
            time.sleep(0.005)
        result = action()
    deadline = time.monotonic() + 20  # the simulator sees the client gone at its next event
    while httpx.get(sim.url + "/sim/state").json()["running"]:
        assert time.monotonic() < deadline, "the closed request never stopped running on the simulator"
        time.sleep(0.005)
    return result


@pytest.mark.parametrize("reply", ["success_flag", "empty"])
def test_vllm_reset_clears_nothing_while_requests_run_and_says_so_only_in_the_body(sims, reply):
    sim = sims("vllm", {"dev_mode": True, "itl_s": 0.02, "vllm_reset_reply": reply})
    prompt = list(range(0, 97))  # 6 full blocks
    httpx.post(sim.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 1})
    busy = _while_one_request_runs(sim, lambda: httpx.post(sim.url + "/reset_prefix_cache"))
    assert busy.status_code == 200  # a 2xx either way: the status says nothing
    assert busy.content == (b"" if reply == "empty" else b'{"success": false}')
    httpx.post(sim.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 1}, headers={"X-Request-Id": "kept"})
    assert sim.requests("kept")[0]["cached_tokens"] == 96  # the refused reset cleared nothing

    idle = httpx.post(sim.url + "/reset_prefix_cache")
    assert idle.status_code == 200 and idle.content == (b"" if reply == "empty" else b'{"success": true}')
    httpx.post(sim.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 1}, headers={"X-Request-Id": "gone"})
    assert sim.requests("gone")[0]["cached_tokens"] == 0
