"""SGLang's dialect (PROTOCOL.md section 2)."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import httpx

from tasks.engines.base import (CacheCounters, EngineAdapter, RoundMetrics, StartupMemory, StartupPattern, _json,
                                _pattern)

# Startup lines; SGLang's "GB" is 2**30 bytes. python/sglang/srt/managers/scheduler.py (init_model_worker),
# python/sglang/srt/mem_cache/memory_pool.py (K and V pools, or one KV pool under MLA),
# python/sglang/srt/model_executor/model_runner.py (load_model).
TOKEN_POOL = re.compile(r"max_total_num_tokens=(?P<tokens>\d+),.*?context_len=(?P<context>\d+)")
KV_ALLOCATED = re.compile(r"KV Cache is allocated\. #tokens: (?P<tokens>\d+), "
                          r"(?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)")
WEIGHTS = re.compile(r"Load weight end\..*?mem usage=(?P<gb>[\d.]+) GB")


class SGLangAdapter(EngineAdapter):
    dialect: ClassVar[str] = "sglang"
    default_port: ClassVar[int] = 30000
    # /health and /health_generate share one handler: 503 while starting, and by default a 1-token
    # generation that answers 503 when no engine output arrives within SGLANG_HEALTH_CHECK_TIMEOUT
    # (20 s), e.g. under a long prefill. SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0 (launch_env)
    # makes /health answer without generating; images older than that switch still generate.
    liveness_path: ClassVar[str] = "/health"
    # SageMaker's /ping answers from the HTTP server alone, on every version: cheap under any load.
    pod_liveness_path: ClassVar[str | None] = "/ping"
    tokenize_path: ClassVar[str | None] = "/tokenize"
    cache_clear: ClassVar[tuple[str, str] | None] = ("POST", "/flush_cache")
    # The native /generate with return_logprob and logprob_start_len 0: meta_info.input_token_logprobs
    # is [logprob, token_id, text] per prompt token, the first logprob None (python/sglang/srt/managers/io_struct.py).
    prompt_logprobs_path: ClassVar[str | None] = "/generate"
    cache_clear_busy_status: ClassVar[int | None] = 400  # /flush_cache refuses while requests run
    # Needs --enable-metrics. sglang:cache_hit_rate is a last-value gauge: never a run figure.
    cache_counters: ClassVar[CacheCounters | None] = CacheCounters(
        queries="sglang:prompt_tokens_total", hits="sglang:cached_tokens_total"
    )
    # python/sglang/srt/metrics/collector.py. A retraction is SGLang's preemption (KV pool full: the
    # request goes back to the queue). Speculative decoding only as last-value gauges.
    round_metrics: ClassVar[RoundMetrics] = RoundMetrics(
        preemptions="sglang:num_retracted_requests_total",
        preemption_word="retractions",
        kv_usage="sglang:token_usage",
        waiting="sglang:num_queue_reqs",
        running="sglang:num_running_reqs",
        queue_time="sglang:queue_time_seconds",
        ttft="sglang:time_to_first_token_seconds",
        itl="sglang:inter_token_latency_seconds",
        e2e="sglang:e2e_request_latency_seconds",
        spec_accept_length="sglang:spec_accept_length",
        spec_accept_rate="sglang:spec_accept_rate",
    )
    reasoning_fields: ClassVar[tuple[str, ...]] = ("reasoning_content", "reasoning")
    # --speculative-algorithm EAGLE, EAGLE3, NEXTN (MTP), STANDALONE, NGRAM (python/sglang/srt/server_args.py).
    speculative_args: ClassVar[tuple[str, ...]] = ("--speculative-algorithm", "--speculative-draft-model-path")
    weights_dtype_args: ClassVar[tuple[str, ...]] = ("--quantization", "--dtype")
    startup_patterns: ClassVar[tuple[StartupPattern, ...]] = (
        _pattern("fallback_backend", "warning", r"not supported.{0,60}(?:fall|using)|use .{0,40} instead"),
    )

    def served_model(self, client: httpx.Client, base_url: str, model: str) -> dict[str, Any]:
        """The server's arguments (/server_info, /get_server_info before it: server_args' `revision` and
        `model_path`) and its model info (/model_info, /get_model_info: `model_path`, `weight_version`)."""
        found: dict[str, Any] = {"revision": None, "model_path": None, "source": []}
        base = base_url.rstrip("/")
        for path in ("/server_info", "/get_server_info"):
            args = _json(client, base + path)
            if args:
                found["revision"] = args.get("revision")
                found["model_path"] = args.get("model_path")
                found["source"].append(f"GET {path} revision, model_path")
                break
        for path in ("/model_info", "/get_model_info"):
            info = _json(client, base + path)
            if info:
                found["model_path"] = found["model_path"] or info.get("model_path")
                found["weight_version"] = info.get("weight_version")
                found["source"].append(f"GET {path} model_path, weight_version")
                break
        return found

    def startup_memory(self, text: str) -> StartupMemory:
        """SGLang logs its total token pool and the context length; the concurrency at that length is
        their ratio (SGLang does not log it). The first "Load weight end" is the target model's."""
        pool, kv, weights = (r.search(text) for r in (TOKEN_POOL, KV_ALLOCATED, WEIGHTS))
        kv_gib = None
        if kv:
            kv_gib = float(kv["kv"]) if kv["kv"] is not None else float(kv["k"]) + float(kv["v"])
        tokens = pool["tokens"] if pool else kv["tokens"] if kv else None
        return StartupMemory(
            kv_tokens=int(tokens) if tokens is not None else None,
            kv_cache_gib=kv_gib,
            weights_gib=float(weights["gb"]) if weights else None,
            context_tokens=int(pool["context"]) if pool else None,
            lines=tuple(m.group(0) for m in (weights, kv, pool) if m),
        ).with_concurrency()

    def launch_command(self, engine: Any, model: Any, port: int) -> list[str]:
        cmd = [
            "python3", "-m", "sglang.launch_server",
            "--model-path", model.path or model.name,
            "--served-model-name", model.name,
            "--revision", model.revision,
            "--host", "0.0.0.0",  # SGLang binds 127.0.0.1 by default: unreachable in a pod
            "--port", str(port),
            "--tp-size", str(engine.tp),
            # SGLang otherwise serves config.json's limit; a longer one also needs
            # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in engines[].env.
            "--context-length", str(model.context_limit_tokens),
            "--enable-metrics",
            "--enable-cache-report",
        ]
        return cmd + list(engine.args)

    def launch_env(self, engine: Any) -> dict[str, str]:
        # /health without a generation: a probe must not queue work behind a busy engine.
        return {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0", **engine.env}

    def prompt_logprobs_body(self, text: str, model: str) -> dict[str, Any]:
        return {"text": text, "sampling_params": {"max_new_tokens": 1, "temperature": 0},
                "return_logprob": True, "logprob_start_len": 0}

    def prompt_logprobs(self, body: Any) -> list[float]:
        return [float(entry[0]) for entry in body["meta_info"]["input_token_logprobs"][1:]]
