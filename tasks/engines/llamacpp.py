"""llama.cpp's server dialect (llama-server, or the same server embedded by PyPI xllamacpp).

Verified against xllamacpp 2026.10.11549 (llama.cpp server, build b0-unknown); each fact sits beside
the attribute or method it shapes. Beyond those: /metrics is served only with --metrics; `echo` on
/v1/completions is ignored (the prompt never comes back); usage comes in streams only with
stream_options.include_usage, with prompt_tokens_details.cached_tokens, and every response carries
llama.cpp's own `timings`.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import httpx

from tasks.engines import register
from tasks.engines.base import (CLEARED, FAILED, CacheCounters, EngineAdapter, HitRate, RoundMetrics, StartupMemory,
                                StartupPattern, _pattern)

SLOT_ERASE_PATH = "/slots/{id}?action=erase"
# llama-server refuses to start unless --slot-save-path names an existing directory
# (common/arg.cpp: "not a directory"); a pod mounts an empty volume here (launch_dirs).
SLOT_SAVE_DIR = "/llamacpp-slots"

# Startup lines at log verbosity 4 (the library's own INFO lines; verbosity 3 hides them):
# src/llama-kv-cache.cpp (one line per KV cache: two for a model with sliding-window layers),
# src/llama-model.cpp (one line per weights buffer: CUDA0, CPU_Mapped, ...), src/llama-context.cpp.
KV_CACHE = re.compile(r"llama_kv_cache: size = +(?P<mib>[\d.]+) MiB \( *(?P<cells>\d+) cells, +(?P<layers>\d+) layers, "
                      r"+(?P<seqs>\d+)/(?P<streams>\d+) seqs\)")
WEIGHTS_BUFFER = re.compile(r"load_tensors: +(?P<buffer>\S+) model buffer size = +(?P<mib>[\d.]+) MiB")
CONTEXT_PER_SEQUENCE = re.compile(r"llama_context: n_ctx_seq += (?P<tokens>\d+)")


@register
class LlamaCppAdapter(EngineAdapter):
    dialect: ClassVar[str] = "llamacpp"
    default_port: ClassVar[int] = 8080
    liveness_path: ClassVar[str] = "/health"  # 503 while the model loads, then {"status":"ok"}
    metrics_path: ClassVar[str | None] = "/metrics"
    tokenize_path: ClassVar[str | None] = "/tokenize"
    slots_path: ClassVar[str] = "/slots"
    launch_dirs: ClassVar[tuple[str, ...]] = (SLOT_SAVE_DIR,)
    speculative_args: ClassVar[tuple[str, ...]] = ("--model-draft", "-md")  # a draft model (llama-server)
    # tools/server refuses echo on /v1/completions ("Only no echo is supported"); /completion's n_probs
    # covers generated tokens only (echo PRs ggml-org/llama.cpp#15189, #17935 unmerged).
    prompt_logprobs_missing: ClassVar[str] = ("llama.cpp's server scores generated tokens only: /v1/completions "
                                              "refuses echo, /completion's n_probs has no prompt tokens")
    cache_clear: ClassVar[tuple[str, str] | None] = ("POST", SLOT_ERASE_PATH)
    # prompt_tokens_total leaves out the cached tokens (unlike SGLang and vLLM): see hit_rate.
    cache_counters: ClassVar[CacheCounters | None] = CacheCounters(
        queries="llamacpp:prompt_tokens_total", hits="llamacpp:prompt_tokens_cached_total"
    )
    # No preemption counter, KV usage gauge or latency histograms; the speculative counters mean
    # what vLLM's do and read 0 without a draft model.
    round_metrics: ClassVar[RoundMetrics] = RoundMetrics(
        waiting="llamacpp:requests_deferred",
        running="llamacpp:requests_processing",
        spec_drafts="llamacpp:spec_decode_num_drafts_total",
        spec_draft_tokens="llamacpp:spec_decode_num_draft_tokens_total",
        spec_accepted_tokens="llamacpp:spec_decode_num_accepted_tokens_total",
    )
    reasoning_fields: ClassVar[tuple[str, ...]] = ("reasoning_content",)  # split when the chat template has it
    # cpp-httplib closes the socket after a streamed response despite "Keep-Alive: timeout=5":
    # a pooled connection then fails the next request ("Can not write request body").
    keeps_alive_after_stream: ClassVar[bool] = False
    # llama.cpp tags each log line with a level letter: "0.00.004.154 W srv init: ...".
    startup_patterns: ClassVar[tuple[StartupPattern, ...]] = (
        _pattern("context_below_training", "info", r"n_ctx_seq \(\d+\) < n_ctx_train"),
        # Loopback only, so an open API is expected; still worth a line in the findings.
        _pattern("no_api_key", "info", r"no API key is set"),
        _pattern("model_metadata_quirk", "warning", r"this is probably a bug in the model"),
        _pattern("engine_error", "error", r"^\s*[\d.]+ E "),
        _pattern("engine_warning", "warning", r"^\s*[\d.]+ W "),
    )

    # ---- request shaping -------------------------------------------------------------
    def exact_output_fields(self, output_tokens: int) -> dict[str, Any]:
        # llama.cpp has no min_tokens; ignore_eos alone makes it generate max_tokens exactly
        # (unless the context fills up first).
        return {"max_tokens": output_tokens, "ignore_eos": True}

    def tokenize_body(self, text: str) -> dict[str, Any]:
        # {"prompt": text} is answered {"tokens": []}, silently.
        return {"content": text}

    # ---- cache --------------------------------------------------------------------------
    def hit_rate(self, before: dict[str, float], after: dict[str, float]) -> HitRate:
        """Queried tokens = processed + cached, because llama.cpp's prompt counter leaves out
        the cached ones."""
        assert self.cache_counters is not None
        processed, cached = self.cache_counters.queries, self.cache_counters.hits
        if any(name not in snap for name in (processed, cached) for snap in (before, after)):
            return HitRate(None, None)
        hits = after[cached] - before[cached]
        return HitRate((after[processed] - before[processed]) + hits, hits)

    def clear_cache_once(self, client: httpx.Client, base_url: str) -> tuple[str, str]:
        """Erase every slot's KV cache (llama.cpp has no global flush; `POST /slots?action=erase` without
        an id is a 404). An erase is served only with a slot save path (501 otherwise) and slots listed;
        the host-RAM prompt cache (--cache-ram) survives it, so DayOne's launcher turns that off."""
        base = base_url.rstrip("/")
        r = client.get(base + self.slots_path)
        if r.status_code != 200:
            return FAILED, f"GET {self.slots_path} -> {r.status_code} (start the server with slots listed)"
        try:
            ids = [int(slot["id"]) for slot in r.json()]
        except (ValueError, KeyError, TypeError) as exc:
            return FAILED, f"GET {self.slots_path}: unreadable slot list ({exc})"
        erased = []
        for slot_id in ids:
            path = SLOT_ERASE_PATH.format(id=slot_id)
            r = client.post(base + path)
            if r.status_code >= 300:
                hint = " (start the server with a slot save path)" if r.status_code == 501 else ""
                return FAILED, f"POST {path} -> {r.status_code}{hint}: {r.text[:200]}"
            erased.append(f"{slot_id}:{r.json().get('n_erased', '?')}")
        return CLEARED, f"erased {len(ids)} slot(s) via POST {SLOT_ERASE_PATH} (slot:tokens {' '.join(erased)})"

    # ---- memory -----------------------------------------------------------------------------
    def startup_memory(self, text: str) -> StartupMemory:
        """KV cells and MiB per KV cache, weights per buffer, and the context each sequence gets. A cache
        has `cells` per stream (one stream with --kv-unified, else one per slot); the KV tokens are the
        largest cache's, since a sliding-window cache beside it holds only its window. The concurrency at
        that context is tokens / n_ctx_seq (llama.cpp does not log it)."""
        caches = list(KV_CACHE.finditer(text))
        buffers = list(WEIGHTS_BUFFER.finditer(text))
        context = CONTEXT_PER_SEQUENCE.search(text)
        return StartupMemory(
            kv_tokens=max(int(m["cells"]) * int(m["streams"]) for m in caches) if caches else None,
            kv_cache_gib=sum(float(m["mib"]) for m in caches) / 1024 if caches else None,
            weights_gib=sum(float(m["mib"]) for m in buffers) / 1024 if buffers else None,
            context_tokens=int(context["tokens"]) if context else None,
            lines=tuple(m.group(0) for m in (*buffers, *caches, context) if m),
        ).with_concurrency()

    # ---- deployment -------------------------------------------------------------------------
    def launch_command(self, engine: Any, model: Any, port: int) -> list[str]:
        """llama-server in a container (ghcr.io/ggml-org/llama.cpp:server); settings as the local
        launcher reads them from engines[i].llamacpp."""
        settings = engine.llamacpp_settings
        cmd = [
            "/app/llama-server",
            "--model", model.path or settings.model or model.name,
            "--alias", model.name,
            "--host", "0.0.0.0",
            "--port", str(port),
            "--ctx-size", str(settings.ctx_size),
            "--parallel", str(settings.parallel),
            "--metrics",
            "--slots",
            "--slot-save-path", SLOT_SAVE_DIR,  # needed for slot erase (cache clear)
            "--cache-ram", str(settings.cache_ram_mib),
        ]
        if settings.kv_unified:
            cmd.append("--kv-unified")
        if settings.chat_template:
            cmd += ["--chat-template", settings.chat_template]
        return cmd + list(engine.args)
