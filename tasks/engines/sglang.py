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
# 0.5.18 adds the dtype: "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 16384, K size: 0.18 GB, ...".
KV_ALLOCATED = re.compile(r"KV Cache is allocated\. (?:dtype: \S+, )?#tokens: (?P<tokens>\d+), "
                          r"(?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)")
WEIGHTS = re.compile(r"Load weight end\..*?mem usage=(?P<gb>[\d.]+) GB")
# A hybrid (Mamba/linear-attention) model's state pool, per rank, apart from the KV pool (mem_cache/memory_pool.py
# MambaPool): "Mamba Cache is allocated. max_mamba_cache_size: 48, conv_state size: 0.09GB, ssm_state size: 6.46GB";
# with speculative decoding it adds "intermediate_ssm_state_cache size: ...GB intermediate_conv_window_cache size:
# ...GB" (the draft tokens' states). The pool is every size the line states.
STATE_POOL = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: \d+,(?P<sizes>.*)")
STATE_POOL_SIZE = re.compile(r"\w+ size: (?P<gb>[\d.]+) ?GB")


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
    startup_memory_per_card: ClassVar[bool] = True  # "[TP0] Load weight end", "[TP0] KV Cache is allocated": per rank
    local_module: ClassVar[str | None] = "sglang.launch_server"  # the container's command too
    # 0.5.18: 400 "Model only supports text input; received unsupported content type 'image_url'."
    text_only_refusal: ClassVar[re.Pattern[str] | None] = re.compile(r"only supports text input")
    cache_clear: ClassVar[tuple[str, str] | None] = ("POST", "/flush_cache")
    # The native /generate with return_logprob and logprob_start_len 0: meta_info.input_token_logprobs
    # is [logprob, token_id, text] per prompt token, the first logprob None (python/sglang/srt/managers/io_struct.py).
    prompt_logprobs_path: ClassVar[str | None] = "/generate"
    cache_clear_busy_status: ClassVar[int | None] = 400  # /flush_cache refuses while requests run
    # Needs --enable-metrics. sglang:cache_hit_rate is a last-value gauge: never a run figure.
    # Both are labelled counters, absent until their first increment (0.5.18: no cached_tokens_total before a hit).
    cache_counters: ClassVar[CacheCounters | None] = CacheCounters(
        queries="sglang:prompt_tokens_total", hits="sglang:cached_tokens_total", absent_until_first=True
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
        # 0.5.18 (labelled prometheus_client metrics): no retractions before the first; no ITL histogram before a
        # request's second token (its startup warm-up generates one), nor TTFT/E2E/queue ones with that warm-up skipped.
        absent_until_first=("sglang:num_retracted_requests_total", "sglang:inter_token_latency_seconds",
                            "sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds",
                            "sglang:queue_time_seconds"),
    )
    reasoning_fields: ClassVar[tuple[str, ...]] = ("reasoning_content", "reasoning")
    # --speculative-algorithm EAGLE, EAGLE3, NEXTN (MTP), STANDALONE, NGRAM (python/sglang/srt/server_args.py).
    speculative_args: ClassVar[tuple[str, ...]] = ("--speculative-algorithm", "--speculative-draft-model-path")
    weights_dtype_args: ClassVar[tuple[str, ...]] = ("--quantization", "--dtype")
    # Not SGLang's own deprecation notices ("The tool_call_parser 'qwen25' is deprecated. Please use 'qwen'
    # instead."; "Endpoint '/get_model_info' is deprecated ... use '/model_info' instead"): no backend fell back.
    startup_patterns: ClassVar[tuple[StartupPattern, ...]] = (
        _pattern("fallback_backend", "warning", r"not supported.{0,60}(?:fall|using)|use .{0,40} instead",
                 unless=r"deprecated"),
    )
    # On the CPU backend (SGLANG_USE_CPU_ENGINE=1) the pool line says available_cpu_mem, not available_gpu_mem, and
    # "mem usage" in the weights line is host RAM; CUDA graphs are off with torch_native attention.

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

    def cached_tokens(self, usage: dict[str, Any] | None) -> int | None:
        """SGLang writes prompt_tokens_details only when tokens were cached (0.5.18: absent from a streamed usage,
        null in a whole answer's), and only under --enable-cache-report, which every launch of DayOne's passes
        (launch_command): a usage without it cached nothing. An endpoint DayOne did not start must run with it."""
        if not usage:
            return None
        return super().cached_tokens(usage) or 0

    def takes_images(self, client: httpx.Client, base_url: str, model: str) -> tuple[bool | None, str]:
        """/model_info (/get_model_info before it) says has_image_understanding."""
        base = base_url.rstrip("/")
        for path in ("/model_info", "/get_model_info"):
            value = _json(client, base + path).get("has_image_understanding")
            if isinstance(value, bool):
                return value, f"GET {path} has_image_understanding"
        return None, ""

    def startup_memory(self, text: str) -> StartupMemory:
        """SGLang logs its total token pool and the context length; the concurrency at that length is
        their ratio (SGLang does not log it). The first "Load weight end" is the target model's."""
        pool, kv, weights, state = (r.search(text) for r in (TOKEN_POOL, KV_ALLOCATED, WEIGHTS, STATE_POOL))
        state_sizes = [float(m["gb"]) for m in STATE_POOL_SIZE.finditer(state["sizes"])] if state else []
        kv_gib = None
        if kv:
            kv_gib = float(kv["kv"]) if kv["kv"] is not None else float(kv["k"]) + float(kv["v"])
        tokens = pool["tokens"] if pool else kv["tokens"] if kv else None
        return StartupMemory(
            kv_tokens=int(tokens) if tokens is not None else None,
            kv_cache_gib=kv_gib,
            weights_gib=float(weights["gb"]) if weights else None,
            state_pool_gib=sum(state_sizes) if state_sizes else None,
            context_tokens=int(pool["context"]) if pool else None,
            lines=tuple(m.group(0) for m in (weights, kv, pool, state) if m),
        ).with_concurrency()

    def _serve_flags(self, engine: Any, model: Any, port: int, host: str) -> list[str]:
        """Every flag after the model path: the same in a pod and on this machine."""
        cmd = [
            "--served-model-name", model.name,
            "--revision", model.revision,
            "--host", host,  # SGLang binds 127.0.0.1 by default: unreachable in a pod
            "--port", str(port),
            "--tp-size", str(engine.tp),
            # SGLang otherwise serves config.json's limit; a longer one also needs
            # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in engines[].env.
            "--context-length", str(model.context_limit_tokens),
            "--enable-metrics",
            "--enable-cache-report",
        ]
        return cmd + list(engine.args)

    def launch_command(self, engine: Any, model: Any, port: int) -> list[str]:
        return ["python3", "-m", str(self.local_module), "--model-path", model.path or model.name,
                *self._serve_flags(engine, model, port, "0.0.0.0")]

    def local_command(self, engine: Any, model: Any, port: int, host: str, python: str) -> list[str]:
        return [python, "-m", str(self.local_module), "--model-path", model.path,
                *self._serve_flags(engine, model, port, host)]

    def launch_env(self, engine: Any) -> dict[str, str]:
        # /health without a generation: a probe must not queue work behind a busy engine.
        return {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0", **engine.env}

    def prompt_logprobs_body(self, text: str, model: str) -> dict[str, Any]:
        return {"text": text, "sampling_params": {"max_new_tokens": 1, "temperature": 0},
                "return_logprob": True, "logprob_start_len": 0}

    def prompt_logprobs(self, body: Any) -> list[float]:
        return [float(entry[0]) for entry in body["meta_info"]["input_token_logprobs"][1:]]
