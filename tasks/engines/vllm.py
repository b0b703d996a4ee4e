"""vLLM's dialect (PROTOCOL.md section 2)."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import httpx

from tasks.engines.base import (BUSY, CLEARED, FAILED, CacheCounters, EngineAdapter, RoundMetrics, StartupMemory,
                                StartupPattern, _json, _pattern, number)

# Startup lines (each rank logs its own copy under tensor parallelism; the first is read):
# vllm/v1/core/kv_cache_utils.py _report_kv_cache_config, vllm/v1/worker/gpu_worker.py,
# vllm/v1/worker/gpu_model_runner.py.
KV_TOKENS = re.compile(r"GPU KV cache size: (?P<tokens>[\d,]+) tokens")
MAX_CONCURRENCY = re.compile(r"Maximum concurrency for (?P<context>[\d,]+) tokens per request: (?P<times>[\d.]+)x")
KV_MEMORY = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")
# Weights memory, in each wording vLLM has used: "Loading model weights took %.4f GB" (V0's
# vllm/worker/model_runner.py; its GB is 2**30 bytes), "Model loading took %.4f GiB and %.6f seconds",
# today "Model loading took %s GiB memory and %.6f seconds" (vllm/v1/worker/gpu_model_runner.py).
SERVER_INFO_REVISION = re.compile(r"\brevision=([^,\s]+)")  # VllmConfig.__str__ (vllm/config/vllm.py)
WEIGHTS = re.compile(r"(?:Model loading|Loading model weights) took (?P<gib>[\d.]+) Gi?B\b")


class VLLMAdapter(EngineAdapter):
    dialect: ClassVar[str] = "vllm"
    default_port: ClassVar[int] = 8000
    liveness_path: ClassVar[str] = "/health"  # can pass before the model serves: probe_ready also generates
    tokenize_path: ClassVar[str | None] = "/tokenize"
    # Only served with VLLM_SERVER_DEV_MODE=1 (set by launch_env).
    cache_clear: ClassVar[tuple[str, str] | None] = ("POST", "/reset_prefix_cache")
    cache_counters: ClassVar[CacheCounters | None] = CacheCounters(
        queries="vllm:prefix_cache_queries_total", hits="vllm:prefix_cache_hits_total"
    )
    # vllm/v1/metrics/loggers.py (counters gain _total in the exposition) and
    # vllm/v1/spec_decode/metrics.py (only with a speculative config).
    round_metrics: ClassVar[RoundMetrics] = RoundMetrics(
        preemptions="vllm:num_preemptions_total",
        kv_usage="vllm:kv_cache_usage_perc",
        waiting="vllm:num_requests_waiting",
        running="vllm:num_requests_running",
        queue_time="vllm:request_queue_time_seconds",
        ttft="vllm:time_to_first_token_seconds",
        itl="vllm:inter_token_latency_seconds",
        e2e="vllm:e2e_request_latency_seconds",
        spec_drafts="vllm:spec_decode_num_drafts_total",
        spec_draft_tokens="vllm:spec_decode_num_draft_tokens_total",
        spec_accepted_tokens="vllm:spec_decode_num_accepted_tokens_total",
    )
    # `reasoning` since ~0.11; the old `reasoning_content` was removed in 2026: read both.
    reasoning_fields: ClassVar[tuple[str, ...]] = ("reasoning", "reasoning_content")
    # --speculative-config (JSON: method mtp, eagle, ngram ...); --speculative-model and
    # --num-speculative-tokens before it (vllm/engine/arg_utils.py).
    speculative_args: ClassVar[tuple[str, ...]] = ("--speculative-config", "--speculative_config", "-sc",
                                                   "--speculative-model", "--num-speculative-tokens")
    weights_dtype_args: ClassVar[tuple[str, ...]] = ("--quantization", "-q", "--dtype")
    # Completions with echo: choices[0].logprobs.token_logprobs holds the prompt's tokens first (the
    # first None), then the one generated token (vllm/entrypoints/openai/serving_completion.py).
    prompt_logprobs_path: ClassVar[str | None] = "/v1/completions"
    startup_patterns: ClassVar[tuple[StartupPattern, ...]] = (
        _pattern("missing_tuned_config", "warning", r"Using default MoE config"),
        _pattern("fallback_backend", "warning", r"no .{0,30}backend.{0,60}(?:fall|using)"),
    )

    def clear_outcome(self, response: httpx.Response) -> str:
        """A 2xx is not a clear: current vLLM answers 200 {"success": false} while running requests
        (or in-flight KV offloads) hold blocks, and clears nothing. Older versions answer an empty
        200 whatever happened; that is all they say, so it counts as a clear."""
        if response.status_code >= 300:
            return FAILED
        try:
            body = response.json()
        except ValueError:
            return CLEARED
        if isinstance(body, dict) and body.get("success") is False:
            return BUSY
        return CLEARED

    def served_model(self, client: httpx.Client, base_url: str, model: str) -> dict[str, Any]:
        """The model list's `root` (the path it was started with), and the revision from /server_info
        (VLLM_SERVER_DEV_MODE, set by launch_env): `?config_format=json` gives model_config.revision,
        older versions only the text of VllmConfig.__str__ ("revision=None" is the default branch)."""
        found = super().served_model(client, base_url, model)
        info = _json(client, base_url.rstrip("/") + "/server_info?config_format=json").get("vllm_config")
        if isinstance(info, dict):
            revision = (info.get("model_config") or {}).get("revision")
        else:
            m = SERVER_INFO_REVISION.search(str(info or ""))
            revision = m.group(1).strip("'\"") if m else None
        if info is not None:
            found["revision"] = None if revision in (None, "None") else str(revision)
            found["source"].append("GET /server_info model_config.revision")
        return found

    def startup_memory(self, text: str) -> StartupMemory:
        """vLLM logs the KV cache in tokens and its maximum concurrency at --max-model-len itself."""
        tokens, conc, kv, weights = (r.search(text) for r in (KV_TOKENS, MAX_CONCURRENCY, KV_MEMORY, WEIGHTS))
        return StartupMemory(
            kv_tokens=int(number(tokens["tokens"])) if tokens else None,
            kv_cache_gib=float(kv["gib"]) if kv else None,
            weights_gib=float(weights["gib"]) if weights else None,
            context_tokens=int(number(conc["context"])) if conc else None,
            max_concurrency=float(conc["times"]) if conc else None,
            max_concurrency_logged=conc is not None,
            lines=tuple(m.group(0) for m in (weights, kv, tokens, conc) if m),
        ).with_concurrency()

    def launch_command(self, engine: Any, model: Any, port: int) -> list[str]:
        cmd = [
            "vllm", "serve", model.path or model.name,
            "--served-model-name", model.name,
            "--revision", model.revision,
            "--host", "0.0.0.0",
            "--port", str(port),
            "--tensor-parallel-size", str(engine.tp),
            "--max-model-len", str(model.context_limit_tokens),
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
        ]
        args = list(engine.args)
        # A tool parser alone is not enough: vLLM refuses tool_choice "auto" without this flag.
        if any(a.split("=")[0] == "--tool-call-parser" for a in args) and "--enable-auto-tool-choice" not in args:
            cmd.append("--enable-auto-tool-choice")
        return cmd + args

    def launch_env(self, engine: Any) -> dict[str, str]:
        return {"VLLM_SERVER_DEV_MODE": "1", **engine.env}  # enables /reset_prefix_cache

    def prompt_logprobs_body(self, text: str, model: str) -> dict[str, Any]:
        return {"model": model, "prompt": text, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}

    def prompt_logprobs(self, body: Any) -> list[float]:
        prompt_tokens = body["usage"]["prompt_tokens"]
        scored = body["choices"][0]["logprobs"]["token_logprobs"][:prompt_tokens]
        return [float(v) for v in scored[1:]]
