"""The server side of each engine dialect the simulator plays (PROTOCOL.md section 2).

This is the simulator's own copy of the facts in tasks/engines/: the simulator plays the engine,
so it must not ask DayOne's client-side adapters what the engine looks like.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StreamShape:
    """A dialect's streamed events, each field where the real server puts it (the recordings in
    tests/fixtures/wire/<engine>-<version>, which tests/sim/test_sim_wire_fixtures.py holds the simulator to).
    `{finish}` stands for the finish reason's JSON (null on an event that does not finish)."""

    role_event: str = '{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'  # chat's first
    delta_head: str = ""  # what every chat delta holds before its text field
    chat_tail: str = ',"logprobs":null,"finish_reason":{finish}}}]}}'  # after a chat delta
    chat_finish_tail: str = ',"logprobs":null,"finish_reason":{finish}}}]}}'  # ... on the event that finishes
    text_tail: str = ',"logprobs":null,"finish_reason":{finish}}}]}}'  # after a completions text
    text_finish_tail: str = ',"logprobs":null,"finish_reason":{finish}}}]}}'
    # Finish reasons sent in an event of their own after the output (chat; completions), with its delta or text.
    chat_finish_alone: tuple[str, ...] = ()
    text_finish_alone: tuple[str, ...] = ()
    finish_delta: str = "{}"
    last_event_tail: str = ""  # top-level fields of the last event before [DONE]
    tool_header_arguments: bool = True  # the tool-call header delta carries "arguments": ""
    tool_delta_head: str = ""  # what a tool-call delta holds before "tool_calls"


@dataclass(frozen=True)
class Dialect:
    name: str
    # Before ready: "503" (listening, health 503) or "closed" (port not bound yet, like vLLM and SGLang).
    starting: str
    health_paths: tuple[str, ...]
    reasoning_field: str | None
    tokenize: bool
    cache_clear: tuple[str, str] | None  # (method, path)
    metrics: bool
    # A "closed" dialect's port binds this share of the startup before it is ready, health 503 meanwhile:
    # SGLang's HTTP server binds once its scheduler has loaded the weights and KV pool, then runs its own warm-up
    # generation (10-15 s of a 45-140 s start, docs/engine-facts-sglang.md). vLLM binds when ready: 0.
    warming_share: float = 0.0
    models_before_ready: bool = False  # /v1/models answers 200 while /health is 503 (both engines do)
    bound_line: str = ""  # logged when a warming dialect binds its port (the last startup line says ready)
    detokenize_field: str = "prompt"  # /detokenize's answer: {"prompt": text} (vLLM) or {"text": text} (SGLang)
    # SGLang's /flush_cache bodies (plain text), idle and while requests are pending (then a 400)
    flushed_body: str = ""
    flush_refused_body: str = ""
    # vLLM's /reset_prefix_cache: served only with VLLM_SERVER_DEV_MODE=1 (404 otherwise); it answers
    # {"success": bool} and clears nothing while requests hold blocks
    clear_needs_dev_mode: bool = False
    clear_answers_success: bool = False
    # Health paths that answer 200 before the engine is ready: SGLang's /ping comes from its HTTP server
    # alone; vLLM binds its port only when ready, so every health path it serves says 200 (never_ready faults)
    health_while_starting: tuple[str, ...] = ()
    preempted_line: str = ""  # logged when a request is preempted ({request_id})
    echo_prompt_logprobs: bool = False  # /v1/completions with echo and logprobs scores the prompt (vLLM)
    # Prometheus names: role -> name. Roles: queries, hits, prompt, generation, running, waiting,
    # requests, ttft, e2e, itl; what the engine spends: preemptions (counter), kv_usage (gauge),
    # queue (histogram), spec_drafts / spec_draft_tokens / spec_accepted (counters, vLLM) or
    # spec_accept_length / spec_accept_rate (gauges, SGLang), exposed only with a speculative profile.
    metric_names: dict[str, str] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)  # quirks.metrics=renamed: role -> other name
    error_wrapped: bool = True  # {"error": {...}} (vLLM, OpenAI) or flat {"object": "error", ...} (SGLang)
    unknown_model_404: bool = True
    startup_lines: tuple[str, ...] = ()
    stream: StreamShape = StreamShape()
    # Where the context check answers (tasks/sim/requests.py check_context): "vllm" (a prompt over the limit is a
    # 400 with param input_tokens; one that fits with max_tokens over it is cut to the room left), "sglang" (a
    # 400 either way, in its words) or "plain" (the OpenAI API's 400).
    context_check: str = "plain"
    # How usage reports cached prompt tokens (tasks/sim/wire.py usage_of): "vllm" (prompt_tokens_details in every
    # usage, chat adds created_cache_tokens), "sglang" (details only where tokens were cached, then
    # reasoning_tokens) or "plain" (the OpenAI API's three counts).
    usage_shape: str = "plain"


SGLANG = Dialect(
    name="sglang",
    starting="closed",
    warming_share=0.25,
    models_before_ready=True,
    health_paths=("/health", "/health_generate", "/ping"),
    health_while_starting=("/ping",),
    preempted_line="WARNING KV cache pool is full. Retract requests. #retracted_reqs: 1",
    reasoning_field="reasoning_content",
    tokenize=True,
    cache_clear=("POST", "/flush_cache"),
    detokenize_field="text",
    flushed_body="Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
                 "requests, the operation will not be performed.)\n",
    flush_refused_body="Flush cache failed.\n",
    metrics=True,
    metric_names={
        "prompt": "sglang:prompt_tokens_total",
        "hits": "sglang:cached_tokens_total",
        "generation": "sglang:generation_tokens_total",
        "requests": "sglang:num_requests_total",
        "running": "sglang:num_running_reqs",
        "waiting": "sglang:num_queue_reqs",
        "hit_rate": "sglang:cache_hit_rate",
        "ttft": "sglang:time_to_first_token_seconds",
        "e2e": "sglang:e2e_request_latency_seconds",
        "itl": "sglang:inter_token_latency_seconds",
        "preemptions": "sglang:num_retracted_requests_total",
        "kv_usage": "sglang:token_usage",
        "queue": "sglang:queue_time_seconds",
        "spec_accept_length": "sglang:spec_accept_length",
        "spec_accept_rate": "sglang:spec_accept_rate",
    },
    renamed={"prompt": "sglang:input_tokens_total", "hits": "sglang:cache_hit_tokens_total"},
    error_wrapped=False,
    unknown_model_404=False,
    context_check="sglang",
    usage_shape="sglang",
    # SGLang 0.5.18: every chat delta opens with "reasoning_content": null; the finish comes in an event of its own
    # (chat), on the last text (completions, whose every event has "usage": null).
    stream=StreamShape(
        role_event='{"reasoning_content":null,"role":"assistant","content":""},"logprobs":null,"finish_reason":null,'
                   '"matched_stop":null}]}',
        delta_head='"reasoning_content":null,',
        chat_tail=',"logprobs":null,"finish_reason":{finish},"matched_stop":null}}]}}',
        chat_finish_tail=',"logprobs":null,"finish_reason":{finish},"matched_stop":null}}]}}',
        text_tail=',"logprobs":null,"finish_reason":{finish},"matched_stop":null}}],"usage":null}}',
        text_finish_tail=',"logprobs":null,"finish_reason":{finish},"matched_stop":null}}],"usage":null}}',
        chat_finish_alone=("stop", "length", "tool_calls"),
        finish_delta='{"reasoning_content":null}',
    ),
    startup_lines=(
        "INFO server_args=ServerArgs(model_path='{model}', host='{host}', port={port}, tp_size=1, enable_metrics=True)",
        "INFO Load weight begin. avail mem=139.28 GB",
        "WARNING MLA prefill backend fa3 is not supported for this model, falling back to triton (Top-k MQA path).",
        "WARNING Using default W8A8 Block FP8 kernel config. Performance might be sub-optimal! "
        "Config file not found at configs/N=4096,K=7168,device_name=NVIDIA_H20.json",
        "INFO Load weight end. elapsed=41.20 s, type=SimForCausalLM, avail mem=52.10 GB, mem usage=87.18 GB.",
        "INFO KV Cache is allocated. dtype: torch.bfloat16, #tokens: {kv_tokens}, K size: {k_gib:.2f} GB, V size: {v_gib:.2f} GB",
        "INFO max_total_num_tokens={kv_tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests={slots}, context_len={context_tokens}, available_gpu_mem=11.62 GB",
        "INFO DeepGEMM JIT compiling kernels and FlashInfer autotuning, this may take a while ...",
        "INFO Capture target decode CUDA graph begin. backend=full, bs=[1, 2, 4, 8, 16, 32, 64], avail mem=52.04 GB",
        "INFO Capture target decode CUDA graph end. elapsed=3.21 s, mem usage=0.79 GB, avail mem=51.25 GB.",
        "INFO The server is fired up and ready to roll!",
    ),
    bound_line="INFO Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)",
)

VLLM = Dialect(
    name="vllm",
    starting="closed",
    models_before_ready=True,  # seen only under faults.never_ready: the port binds when ready
    health_paths=("/health", "/ping"),
    health_while_starting=("/health", "/ping"),
    preempted_line="WARNING Sequence group {request_id} is preempted by PreemptionMode.RECOMPUTE",
    echo_prompt_logprobs=True,
    reasoning_field="reasoning",
    tokenize=True,
    cache_clear=("POST", "/reset_prefix_cache"),
    clear_needs_dev_mode=True,
    clear_answers_success=True,
    metrics=True,
    metric_names={
        "queries": "vllm:prefix_cache_queries_total",
        "hits": "vllm:prefix_cache_hits_total",
        "prompt": "vllm:prompt_tokens_total",
        "generation": "vllm:generation_tokens_total",
        "requests": "vllm:request_success_total",
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "ttft": "vllm:time_to_first_token_seconds",
        "e2e": "vllm:e2e_request_latency_seconds",
        "itl": "vllm:inter_token_latency_seconds",
        "preemptions": "vllm:num_preemptions_total",
        "kv_usage": "vllm:kv_cache_usage_perc",
        "queue": "vllm:request_queue_time_seconds",
        "spec_drafts": "vllm:spec_decode_num_drafts_total",
        "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
        "spec_accepted": "vllm:spec_decode_num_accepted_tokens_total",
    },
    renamed={"queries": "vllm:gpu_prefix_cache_queries_total", "hits": "vllm:gpu_prefix_cache_hits_total"},
    context_check="vllm",
    usage_shape="vllm",
    # vLLM 0.32: the role event adds prompt_token_ids and prompt_text; "stop" and "tool_calls" finish in an empty
    # event of their own, "length" on the last output; the stream's last event before [DONE] has the
    # system_fingerprint; the tool-call header has no "arguments".
    stream=StreamShape(
        role_event='{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],'
                   '"prompt_token_ids":null,"prompt_text":null}',
        chat_tail=',"logprobs":null,"finish_reason":{finish},"token_ids":null}}]}}',
        chat_finish_tail=',"logprobs":null,"finish_reason":{finish},"stop_reason":null,"token_ids":null}}]}}',
        text_tail=',"logprobs":null,"finish_reason":{finish},"stop_reason":null,"prompt_token_ids":null,'
                  '"token_ids":null}}]}}',
        text_finish_tail=',"logprobs":null,"finish_reason":{finish},"stop_reason":null,"prompt_token_ids":null,'
                         '"token_ids":null}}]}}',
        chat_finish_alone=("stop", "tool_calls"),
        text_finish_alone=("stop",),
        last_event_tail=',"system_fingerprint":"vllm-0.32.0-dayone-sim"',
        tool_header_arguments=False,
        tool_delta_head='"content":null,',
    ),
    startup_lines=(
        "INFO vLLM API server version 0.11.0 (DayOne simulator), model={model}",
        "INFO Model loading took 61.20 GiB memory and 42.118803 seconds",
        "INFO Available KV cache memory: {kv_gib:.2f} GiB",
        "INFO GPU KV cache size: {kv_tokens:,} tokens",
        "INFO Maximum concurrency for {context_tokens:,} tokens per request: {max_concurrency:.2f}x",
        "WARNING No MLA prefill backend is adapted to this model; falling back to the Top-k MQA path.",
        "WARNING Using default MoE config. Performance might be sub-optimal! "
        "Config file not found at fused_moe/configs/E=256,N=256,device_name=NVIDIA_H20,dtype=fp8_w8a8.json",
        "INFO Autotuning FlashInfer kernels and compiling with torch.compile (JIT) ...",
        "INFO Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%",
        "INFO Graph capturing finished in 4 secs, took 0.31 GiB",
        "INFO Starting vLLM API server on http://{host}:{port}",
        "INFO Application startup complete.",
    ),
)

OPENAI = Dialect(
    name="openai",
    starting="503",
    health_paths=("/health",),
    reasoning_field=None,
    tokenize=False,
    cache_clear=None,
    metrics=False,
    startup_lines=(
        "INFO OpenAI-compatible server (DayOne simulator) loading {model}",
        "INFO listening on http://{host}:{port}",
    ),
)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (SGLANG, VLLM, OPENAI)}

# KV bytes per token of the simulated model (a 7B-class model in bf16, as the weights lines suggest).
KV_BYTES_PER_TOKEN = 131_072


def startup_values(profile: Any, host: str, port: int) -> dict[str, Any]:
    """What the startup lines say, from the profile: the KV cache is cache_capacity_tokens (the pool
    /metrics reports usage of), sized for context_limit tokens per request."""
    kv_gib = profile.cache_capacity_tokens * KV_BYTES_PER_TOKEN / 2**30
    return {"model": profile.model, "host": host, "port": port, "slots": profile.slots,
            "kv_tokens": profile.cache_capacity_tokens, "kv_gib": kv_gib, "k_gib": kv_gib / 2, "v_gib": kv_gib / 2,
            "context_tokens": profile.context_limit,
            "max_concurrency": profile.cache_capacity_tokens / profile.context_limit}
