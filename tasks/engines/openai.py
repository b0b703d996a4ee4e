"""A generic OpenAI-compatible server: the API alone, no cache clear, no known counters."""

from __future__ import annotations

from typing import Any, ClassVar

from tasks.engines.base import EngineAdapter


class OpenAIAdapter(EngineAdapter):
    dialect: ClassVar[str] = "openai"
    default_port: ClassVar[int] = 8000
    liveness_path: ClassVar[str] = "/v1/models"
    metrics_path: ClassVar[str | None] = None

    def exact_output_fields(self, output_tokens: int) -> dict[str, Any]:
        return {"max_tokens": output_tokens}
