"""The local launcher for llama.cpp's server (PyPI xllamacpp) with a PyPI-shipped GGUF model.

Settings come from `engines[i].llamacpp` (every key optional):

| key             | default                 | meaning                                                         |
|-----------------|-------------------------|-----------------------------------------------------------------|
| model           | model.path or "smollm2" | "smollm2", "gemma3-270m" (see tasks/models.py) or a GGUF path   |
| ctx_size        | 4096                    | KV cache size in tokens; with kv_unified every slot may use all |
| parallel        | 1                       | slots: requests decoded together (continuous batching)          |
| threads         | CPU count - 1 (min 1)   | decode threads; one core is left to DayOne's load client        |
| threads_batch   | threads                 | prompt-processing threads                                       |
| batch_size      | 2048                    | logical batch (n_batch)                                         |
| ubatch_size     | 512                     | physical batch (n_ubatch)                                       |
| kv_unified      | true                    | one KV buffer shared by all slots (false: ctx_size / parallel)   |
| cont_batching   | true                    | continuous batching                                             |
| cache_prompt    | true                    | reuse a slot's KV for a shared prompt prefix                    |
| cache_ram_mib   | 0                       | host-RAM prompt cache; 0 so a slot erase really empties caches  |
| chat_template   | "" (the model's own)    | a built-in template name (e.g. "chatml") or a Jinja template    |
| reasoning_format| "deepseek"              | none, auto, deepseek, deepseek-legacy                           |
| flash_attn      | "auto"                  | auto, on, off                                                   |
| temperature     | llama.cpp's (0.8)       | default sampling temperature of requests that do not set one    |

The server always listens on 127.0.0.1, serves /metrics and /slots, and has a slot save path
(needed by the adapter's cache clear, which erases every slot).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import httpx

from tasks.config import EngineSpec, RunConfig
from tasks.models import KNOWN_MODELS, ModelNotFound, file_sha256, model_path
from tasks.targets.base import DeployError, LaunchSpec


class LlamaCppSettingsError(DeployError):
    """A bad key or value in engines[i].llamacpp; the message names it and the fix."""


@dataclass(frozen=True)
class _Setting:
    kind: type
    default: Any
    minimum: int | None = None
    choices: tuple[str, ...] = ()
    help: str = ""


_SETTINGS: dict[str, _Setting] = {
    "model": _Setting(str, None, help=f"use one of {', '.join(KNOWN_MODELS)} or a GGUF file path"),
    "ctx_size": _Setting(int, 4096, 256, help="give the KV cache size in tokens, e.g. 4096"),
    "parallel": _Setting(int, 1, 1, help="give the number of slots, an integer >= 1"),
    "threads": _Setting(int, None, 1, help="give a thread count >= 1 (default: the CPU count minus one)"),
    "threads_batch": _Setting(int, None, 1, help="give a thread count >= 1 (default: threads)"),
    "batch_size": _Setting(int, 2048, 1, help="give an integer >= 1"),
    "ubatch_size": _Setting(int, 512, 1, help="give an integer >= 1, at most batch_size"),
    "kv_unified": _Setting(bool, True, help="give true or false"),
    "cont_batching": _Setting(bool, True, help="give true or false"),
    "cache_prompt": _Setting(bool, True, help="give true or false"),
    "cache_ram_mib": _Setting(int, 0, 0, help="give MiB >= 0; 0 turns the host-RAM prompt cache off"),
    "chat_template": _Setting(str, "", help="give a built-in template name such as chatml, or a Jinja template"),
    "reasoning_format": _Setting(str, "deepseek", choices=("none", "auto", "deepseek", "deepseek-legacy")),
    "flash_attn": _Setting(str, "auto", choices=("auto", "on", "off")),
    "temperature": _Setting(float, None, 0, help="give a temperature >= 0, e.g. 0 for greedy decoding"),
}


def _engine_index(config: RunConfig, engine: EngineSpec) -> int:
    for i, e in enumerate(config.engines):
        if e.name == engine.name:
            return i
    return 0


def resolve_settings(config: RunConfig, engine: EngineSpec) -> dict[str, Any]:
    """engines[i].llamacpp validated, with every default filled in (what identity records)."""
    where = f"engines[{_engine_index(config, engine)}]"
    given = dict(engine.llamacpp)
    problems = []
    for key in sorted(set(given) - set(_SETTINGS)):
        problems.append(f"{where}.llamacpp.{key}: unknown setting. Fix: use one of {', '.join(_SETTINGS)}")
    out: dict[str, Any] = {}
    for key, spec in _SETTINGS.items():
        value = given.get(key, spec.default)
        if value is None:
            out[key] = None
            continue
        if spec.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        ok = isinstance(value, spec.kind) and not (spec.kind is int and isinstance(value, bool))
        if ok and spec.minimum is not None and value < spec.minimum:
            ok = False
        if ok and spec.choices and value not in spec.choices:
            ok = False
        if not ok:
            fix = spec.help or f"use one of {', '.join(spec.choices)}"
            problems.append(f"{where}.llamacpp.{key}: {value!r} is not valid. Fix: {fix}")
            continue
        out[key] = value
    if engine.args:
        problems.append(
            f"{where}.args: the llamacpp launcher takes no command-line arguments. "
            f"Fix: put settings in {where}.llamacpp ({', '.join(_SETTINGS)})"
        )
    if problems:
        raise LlamaCppSettingsError("; ".join(problems))
    out["model"] = out["model"] or config.model.path or "smollm2"
    # One core stays with the client: llama.cpp's threads spin while waiting, and on an
    # oversubscribed machine (2 cores: server + load generator) decode fell 20x with 2 threads.
    out["threads"] = out["threads"] or max(1, (os.cpu_count() or 2) - 1)
    out["threads_batch"] = out["threads_batch"] or out["threads"]
    if out["ubatch_size"] > out["batch_size"]:
        raise LlamaCppSettingsError(
            f"{where}.llamacpp.ubatch_size: {out['ubatch_size']} is over batch_size {out['batch_size']}. "
            "Fix: give ubatch_size <= batch_size"
        )
    known = KNOWN_MODELS.get(out["model"])
    if known and out["ctx_size"] > known.context_limit_tokens:
        raise LlamaCppSettingsError(
            f"{where}.llamacpp.ctx_size: {out['ctx_size']} is over {known.name}'s trained context "
            f"{known.context_limit_tokens}. Fix: give ctx_size <= {known.context_limit_tokens}"
        )
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
        raise DeployError("xllamacpp is not installed. Fix: pip install xllamacpp") from None


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

    def command(self, config: RunConfig, engine: EngineSpec, port: int) -> LaunchSpec:
        settings = resolve_settings(config, engine)
        settings["model_path"] = str(_model_file(settings, f"engines[{_engine_index(config, engine)}]"))
        argv = [
            sys.executable, "-m", "tasks.targets.llamacpp_server",
            "--host", "127.0.0.1",
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
    p.endpoint_metrics = True
    p.endpoint_slots = True
    p.endpoint_props = True
    p.slot_save_path = slot_save_path
    return p
