"""Engine adapters, one per dialect. `adapter_for(dialect)` is the only way in."""

from __future__ import annotations

from tasks.engines.base import EngineAdapter, HitRate, Readiness
from tasks.engines.openai import OpenAIAdapter
from tasks.engines.sglang import SGLangAdapter
from tasks.engines.vllm import VLLMAdapter

_ADAPTERS: dict[str, type[EngineAdapter]] = {
    a.dialect: a for a in (SGLangAdapter, VLLMAdapter, OpenAIAdapter)
}


def register(adapter: type[EngineAdapter]) -> type[EngineAdapter]:
    _ADAPTERS[adapter.dialect] = adapter
    return adapter


def adapter_for(dialect: str) -> EngineAdapter:
    if dialect == "llamacpp" and dialect not in _ADAPTERS:
        from tasks.engines import llamacpp  # noqa: F401  (registers itself)
    try:
        return _ADAPTERS[dialect]()
    except KeyError:
        raise KeyError(f"no engine adapter for dialect {dialect!r} (have {sorted(_ADAPTERS)})") from None


__all__ = ["EngineAdapter", "HitRate", "Readiness", "adapter_for", "register"]
