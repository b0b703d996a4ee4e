"""The local target: the engine runs as a process on this machine, on a free loopback port.

Same lifecycle as a Kubernetes deployment: deploy starts a detached process (it outlives the
task that started it), wait_ready polls the adapter's readiness, teardown stops the process group.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Protocol

import httpx

from tasks.config import EngineSpec, RunConfig
from tasks.engines import Readiness, adapter_for
from tasks.staging import RunDir
from tasks.targets.base import Deployment, DeployError, identity_digest


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]


class Launcher(Protocol):
    def identity(self, config: RunConfig, engine: EngineSpec) -> dict[str, Any]: ...

    def command(self, config: RunConfig, engine: EngineSpec, port: int) -> LaunchSpec: ...

    def restart_count(self, base_url: str) -> int | None: ...


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

    def command(self, config: RunConfig, engine: EngineSpec, port: int) -> LaunchSpec:
        import json

        profile = {"model": config.model.name, "context_limit": config.model.context_limit_tokens}
        profile.update(engine.sim_profile)
        argv = [
            sys.executable, "-m", "tasks.sim",
            "--dialect", engine.dialect,
            "--host", "127.0.0.1",
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


def launcher_for(engine: EngineSpec) -> Launcher:
    if engine.launcher == "sim":
        return SimLauncher()
    if engine.launcher == "llamacpp":
        from tasks.targets.llamacpp import LlamaCppLauncher

        return LlamaCppLauncher()
    raise DeployError(f"engines[{engine.name}].launcher: no launcher {engine.launcher!r} for target local")


class LocalTarget:
    name = "local"

    def pin(self, config: RunConfig, engine: EngineSpec) -> dict[str, Any]:
        if engine.launcher == "external":
            if not engine.endpoint:
                raise DeployError(f"engines[{engine.name}].endpoint: required when launcher is 'external'")
            identity = {"launcher": "external", "dialect": engine.dialect}
        else:
            identity = launcher_for(engine).identity(config, engine)
        return {"identity": identity, "image_digest": identity_digest(identity)}

    def deploy(self, config: RunConfig, engine: EngineSpec, run_dir: RunDir, pinned: dict[str, Any]) -> Deployment:
        self.teardown(config, engine.name, run_dir)  # a retry replaces what an earlier try started
        if engine.launcher == "external":
            dep = Deployment(engine.name, engine.endpoint.rstrip("/"), pinned["image_digest"], pinned["identity"], {})
            dep.save(run_dir)
            return dep
        launcher = launcher_for(engine)
        port = free_port()
        spec = launcher.command(config, engine, port)
        log_path = run_dir.path / "logs" / f"{engine.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                spec.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **spec.env},
                start_new_session=True,  # outlives this task; teardown kills the whole group
                cwd=str(Path(__file__).resolve().parents[2]),
            )
        dep = Deployment(
            engine=engine.name,
            base_url=f"http://127.0.0.1:{port}",
            image_digest=pinned["image_digest"],
            identity=pinned["identity"],
            handle={"pid": proc.pid, "port": port, "log": str(log_path), "launcher": engine.launcher},
        )
        dep.save(run_dir)
        return dep

    def wait_ready(self, config: RunConfig, deployment: Deployment, timeout_s: float) -> Readiness:
        adapter = adapter_for(config.engine(deployment.engine).dialect)
        return asyncio.run(_poll_ready(adapter, deployment, config.model.name, timeout_s))

    def restart_count(self, deployment: Deployment) -> int | None:
        launcher = deployment.handle.get("launcher")
        if launcher in (None, "external"):
            return None
        if launcher == "sim":
            return SimLauncher().restart_count(deployment.base_url)
        from tasks.targets.llamacpp import LlamaCppLauncher

        return LlamaCppLauncher().restart_count(deployment.base_url)

    def startup_log(self, deployment: Deployment) -> str:
        path = deployment.handle.get("log")
        if not path or not Path(path).exists():
            return ""
        return Path(path).read_text(encoding="utf-8", errors="replace")[-2_000_000:]

    def teardown(self, config: RunConfig, engine: str, run_dir: RunDir) -> None:
        dep = Deployment.load(run_dir, engine)
        if not dep or "pid" not in dep.handle:
            return
        _stop_group(int(dep.handle["pid"]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of this process still "exists": reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def _stop_group(pid: int, grace_s: float = 10.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.1)


async def _poll_ready(adapter: Any, dep: Deployment, model: str, timeout_s: float) -> Readiness:
    deadline = time.monotonic() + timeout_s
    last = Readiness(False, "liveness", "not polled yet")
    pid = dep.handle.get("pid")
    async with httpx.AsyncClient(timeout=10) as client:
        while time.monotonic() < deadline:
            if pid and not _alive(int(pid)):
                raise DeployError(
                    f"engine {dep.engine}: process exited before it was ready; see its log {dep.handle.get('log')}"
                )
            last = await adapter.probe_ready(client, dep.base_url, model)
            if last.ready:
                return last
            await asyncio.sleep(0.25)
    raise DeployError(
        f"engine {dep.engine}: not ready after {timeout_s:.0f} s (last stage {last.stage}: {last.detail})"
    )
