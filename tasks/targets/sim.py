"""The local launcher for DayOne's engine simulator: `python -m tasks.sim`, speaking the engine's dialect."""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from typing import Any

import httpx

from tasks.config import RunConfig
from tasks.config.engines import EngineSpec
from tasks.targets.base import LaunchSpec


class SimLauncher:
    """DayOne's engine simulator, `python -m tasks.sim`, speaking the engine's dialect."""

    def identity(self, config: RunConfig, engine: EngineSpec) -> dict[str, Any]:
        return {
            "launcher": "sim",
            "dialect": engine.dialect,
            "dayone_version": version("dayone"),
            "profile": dict(sorted(engine.sim_profile.items())),
            "model": config.model.name,
        }

    def command(self, config: RunConfig, engine: EngineSpec, port: int, host: str = "127.0.0.1") -> LaunchSpec:
        profile = {"model": config.model.name, "context_limit": config.model.context_limit_tokens}
        profile.update(engine.sim_profile)
        argv = [
            sys.executable, "-m", "tasks.sim",
            "--dialect", engine.dialect,
            "--host", host,
            "--port", str(port),
            "--profile-json", json.dumps(profile, sort_keys=True),
        ]
        return LaunchSpec(argv, dict(engine.env))

    def restart_count(self, base_url: str) -> int | None:
        try:
            r = httpx.get(base_url + "/sim/state", timeout=5)
            return int(r.json()["restarts"]) if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, KeyError):
            return None
