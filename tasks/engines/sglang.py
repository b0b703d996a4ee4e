"""SGLang's dialect (PROTOCOL.md section 2)."""

from __future__ import annotations

from typing import Any, ClassVar

from tasks.engines.base import CacheCounters, EngineAdapter, StartupPattern, _pattern


class SGLangAdapter(EngineAdapter):
    dialect: ClassVar[str] = "sglang"
    default_port: ClassVar[int] = 30000
    liveness_path: ClassVar[str] = "/health"
    tokenize_path: ClassVar[str | None] = "/tokenize"
    cache_clear: ClassVar[tuple[str, str] | None] = ("POST", "/flush_cache")
    cache_clear_busy_status: ClassVar[int | None] = 400  # /flush_cache refuses while requests run
    # Needs --enable-metrics. sglang:cache_hit_rate is a last-value gauge: never a run figure.
    cache_counters: ClassVar[CacheCounters | None] = CacheCounters(
        queries="sglang:prompt_tokens_total", hits="sglang:cached_tokens_total"
    )
    reasoning_fields: ClassVar[tuple[str, ...]] = ("reasoning_content", "reasoning")
    startup_patterns: ClassVar[tuple[StartupPattern, ...]] = (
        _pattern("fallback_backend", "warning", r"not supported.{0,60}(?:fall|using)|use .{0,40} instead"),
    )

    def launch_command(self, engine: Any, model: Any, port: int) -> list[str]:
        cmd = [
            "python3", "-m", "sglang.launch_server",
            "--model-path", model.path or model.name,
            "--served-model-name", model.name,
            "--revision", model.revision,
            "--host", "0.0.0.0",  # SGLang binds 127.0.0.1 by default: unreachable in a pod
            "--port", str(port),
            "--tp-size", str(engine.tp),
            "--enable-metrics",
            "--enable-cache-report",
        ]
        return cmd + list(engine.args)
