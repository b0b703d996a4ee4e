"""The real SGLang (0.5.18's CPU backend, `make sglang-venv`) against what DayOne reads from it.

One start for the module's tests (the session fixture `real_sglang`), through the local target's sglang launcher
with the demo preset's CPU settings (SGLANG_USE_CPU_ENGINE=1, --device cpu, torch_native attention, a 16K-token
pool). Each test failed on DayOne before it was held to the real engine (docs/engine-facts-sglang.md): the launcher
did not exist, 0.5.18's KV line was not read, a cold request's cached tokens were "not reported", and a text-only
model's refusal of an image was a failed check.
"""

from __future__ import annotations

import httpx

from client_timing_helpers import assert_client_stands_within_bounds
from tasks.checks import image_input
from tasks.checks.base import NOT_APPLICABLE, Probe
from tasks.engines import adapter_for


def test_the_sglang_launcher_serves_the_model_directory_from_its_own_environment(real_sglang):
    assert real_sglang.deployment.identity["engine_version"] == "sglang 0.5.18"
    info = httpx.get(real_sglang.base_url + "/server_info", timeout=60).json()
    assert info["model_path"].endswith("SmolLM2-135M-Instruct-bf16") and info["device"] == "cpu"
    assert info["context_length"] == 2048 and info["enable_cache_report"] is True


def test_the_cpu_startup_log_gives_the_kv_pool_and_its_memory(real_sglang):
    memory = adapter_for("sglang").startup_memory(real_sglang.target.startup_log(real_sglang.deployment))
    assert (memory.kv_tokens, memory.context_tokens) == (16_384, 2048)
    assert memory.kv_cache_gib is not None and memory.kv_cache_gib > 0  # "KV Cache is allocated. dtype: ..."


def test_a_cold_request_cached_no_tokens(real_sglang):
    adapter = adapter_for("sglang")
    httpx.post(real_sglang.base_url + "/flush_cache", timeout=30)
    body = {"model": "SmolLM2-135M-Instruct", "prompt": "A cold prompt about lighthouses and ships", "max_tokens": 2,
            "temperature": 0}
    usage = httpx.post(real_sglang.base_url + "/v1/completions", json=body, timeout=120).json()["usage"]
    assert usage.get("prompt_tokens_details") is None  # SGLang names cached tokens only above 0
    assert adapter.cached_tokens(usage) == 0


def test_a_text_only_model_refusing_an_image_is_not_the_engines_failure(real_sglang):
    ctx = real_sglang.ctx()
    with ctx.endpoint.http_client(120) as client:
        result = image_input.run(Probe(ctx.endpoint, client))
    assert result.outcome == NOT_APPLICABLE, result.evidence
    assert result.evidence["status"] == 400 and "has_image_understanding" in result.evidence["reason"]


def test_the_clients_ttft_and_itl_stand_within_bounds_of_sglangs_own_histograms(real_sglang, tmp_path):
    assert_client_stands_within_bounds(real_sglang, tmp_path)  # 4 streams of 128 in / 16 out
