"""The local launcher for llama.cpp's server (PyPI xllamacpp) with a PyPI-shipped GGUF model.

Settings come from `engines[i].llamacpp`, validated with the run config (LlamaCppSettings in
tasks/config/llamacpp.py: each key, its default and bounds). What depends on this machine (threads) is
filled in here, at launch.

The server always listens on 127.0.0.1, serves /metrics and /slots, and has a slot save path
(needed by the adapter's cache clear, which erases every slot).
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import httpx

from tasks.config import RunConfig
from tasks.config.engines import EngineSpec
from tasks.config.models import ModelNotFound, file_sha256, model_path
from tasks.targets.base import LaunchSpec
from tasks.engines.readiness import DeployError


class LlamaCppSettingsError(DeployError):
    """A model file that is not on this machine; the message names engines[i].llamacpp.model and the fix."""


def _engine_index(config: RunConfig, engine: EngineSpec) -> int:
    for i, e in enumerate(config.engines):
        if e.name == engine.name:
            return i
    return 0


def resolve_settings(config: RunConfig, engine: EngineSpec) -> dict[str, Any]:
    """engines[i].llamacpp with every default filled in, this machine's included (what identity records)."""
    settings = engine.llamacpp_settings
    out = settings.model_dump()
    out["model"] = settings.model_for(config.model)
    # One core stays with the client: llama.cpp's threads spin while waiting, and on an
    # oversubscribed machine (2 cores: server + load generator) decode fell 20x with 2 threads.
    out["threads"] = out["threads"] or max(1, (os.cpu_count() or 2) - 1)
    out["threads_batch"] = out["threads_batch"] or out["threads"]
    return out


def _model_file(settings: dict[str, Any], where: str) -> Path:
    try:
        return model_path(settings["model"])
    except ModelNotFound as exc:
        raise LlamaCppSettingsError(f"{where}.llamacpp.model: {exc}") from None


def xllamacpp_version() -> str:
    try:
        return version("xllamacpp")
    except PackageNotFoundError:
        raise DeployError("xllamacpp is not installed (launcher llamacpp runs llama.cpp's server on this "
                          "machine). Fix: pip install 'dayone[local]'") from None


class LlamaCppLauncher:
    """llama.cpp's server as a local process: `python -m tasks.targets.llamacpp_server`."""

    def identity(self, config: RunConfig, engine: EngineSpec) -> dict[str, Any]:
        settings = resolve_settings(config, engine)
        path = _model_file(settings, f"engines[{_engine_index(config, engine)}]")
        return {
            "launcher": "llamacpp",
            "dialect": engine.dialect,
            "xllamacpp_version": xllamacpp_version(),
            "model_file": path.name,
            "model_sha256": file_sha256(path),
            "served_model": config.model.name,
            "settings": settings,
        }

    def command(self, config: RunConfig, engine: EngineSpec, port: int, host: str = "127.0.0.1") -> LaunchSpec:
        settings = resolve_settings(config, engine)
        settings["model_path"] = str(_model_file(settings, f"engines[{_engine_index(config, engine)}]"))
        argv = [
            sys.executable, "-m", "tasks.targets.llamacpp_server",
            "--host", host,
            "--port", str(port),
            "--alias", config.model.name,
            "--settings-json", json.dumps(settings, sort_keys=True),
        ]
        return LaunchSpec(argv, dict(engine.env))

    def restart_count(self, base_url: str) -> int | None:
        """0 while the server answers: a local process has no supervisor that could restart it
        behind DayOne's back (a crash shows as unreachable: None, unknown)."""
        try:
            r = httpx.get(base_url.rstrip("/") + "/health", timeout=5)
        except httpx.HTTPError:
            return None
        return 0 if r.status_code == 200 else None


_FLASH_ATTN = {"auto": "LLAMA_FLASH_ATTN_TYPE_AUTO", "on": "LLAMA_FLASH_ATTN_TYPE_ENABLED", "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED"}
_REASONING = {
    "none": "COMMON_REASONING_FORMAT_NONE",
    "auto": "COMMON_REASONING_FORMAT_AUTO",
    "deepseek": "COMMON_REASONING_FORMAT_DEEPSEEK",
    "deepseek-legacy": "COMMON_REASONING_FORMAT_DEEPSEEK_LEGACY",
}


def build_params(settings: dict[str, Any], host: str, port: int, alias: str, slot_save_path: str) -> Any:
    """xllamacpp.CommonParams from resolved settings (run inside the server process)."""
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = settings["model_path"]
    p.model_alias = {alias}
    p.hostnames = [host]
    p.port = port
    p.n_ctx = settings["ctx_size"]
    p.n_parallel = settings["parallel"]
    p.kv_unified = settings["kv_unified"]
    p.cont_batching = settings["cont_batching"]
    p.cache_prompt = settings["cache_prompt"]
    p.cache_ram_mib = settings["cache_ram_mib"]
    p.cache_idle_slots = settings["cache_ram_mib"] > 0  # idle-slot caching lives in the RAM cache
    p.n_batch = settings["batch_size"]
    p.n_ubatch = settings["ubatch_size"]
    p.cpuparams.n_threads = settings["threads"]
    p.cpuparams_batch.n_threads = settings["threads_batch"]
    if settings["chat_template"]:
        p.chat_template = settings["chat_template"]
    p.reasoning_format = getattr(xllamacpp.common_reasoning_format, _REASONING[settings["reasoning_format"]])
    p.flash_attn_type = getattr(xllamacpp.llama_flash_attn_type, _FLASH_ATTN[settings["flash_attn"]])
    if settings["temperature"] is not None:
        p.sampling.temp = settings["temperature"]
    # Verbosity 4 adds llama.cpp's own INFO lines (KV cache cells and MiB, weights per buffer, devices),
    # which the adapter reads back (LlamaCppAdapter.startup_memory); 3 prints only the server's.
    p.verbosity = 4
    p.endpoint_metrics = True
    p.endpoint_slots = True
    p.endpoint_props = True
    p.slot_save_path = slot_save_path
    return p
