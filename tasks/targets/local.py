"""The local target: the engine runs as a process on this machine, on a free loopback port.

Same lifecycle as a Kubernetes deployment: deploy starts a detached process (it outlives the
task that started it), wait_ready polls the adapter's readiness, teardown stops the process group.

The engine, its loopback port and its log are node-local by nature, whatever the run's storage:
every step of an engine must run on the machine that deployed it (make demo, the CLI, a
LocalExecutor). The deployment records which machine (a hash of its host name), and a step on
another machine fails saying so instead of reading someone else's loopback port, log or pid. On a
shared-nothing Airflow use the kubernetes target, whose startup log comes from the pod's API.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
from pathlib import Path
from typing import Any

from tasks.config import EngineSpec, RunConfig
from tasks.endpoint_access import EndpointAccess
from tasks.desensitize import recorded_env
from tasks.engines import Readiness, adapter_for
from tasks.ports import free_port
from tasks.processes import alive, start_group, stop_group
from tasks.readiness import UP, Platform, wait_until_serving
from tasks.staging import RunDir
from tasks.targets.base import Deployment, DeployError, Launcher, identity_digest
from tasks.targets.llamacpp import LlamaCppLauncher
from tasks.targets.sim import SimLauncher


def this_node() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:12]


def _on_this_node(deployment: Deployment) -> None:
    node = deployment.handle.get("node")
    if node and node != this_node():
        raise DeployError(f"engine {deployment.engine}: its local process runs on another machine; the local "
                          "target runs every step of an engine on the machine that deployed it (make demo, "
                          "the CLI, a LocalExecutor). On a distributed Airflow use target: kubernetes")


def launcher_for(launcher: str | None) -> Launcher:
    if launcher == "sim":
        return SimLauncher()
    if launcher == "llamacpp":
        return LlamaCppLauncher()
    raise DeployError(f"no launcher {launcher!r} for target local")


class LocalTarget:
    name = "local"

    def pin(self, config: RunConfig, engine: EngineSpec) -> dict[str, Any]:
        if engine.launcher == "external":
            identity = {"launcher": "external", "dialect": engine.dialect}
        else:
            identity = launcher_for(engine.launcher).identity(config, engine)
            if engine.env:  # a setting of the start, as the manifest records it
                identity["env"] = recorded_env(engine.env)
        return {"identity": identity, "image_digest": identity_digest(identity)}

    def deploy(self, config: RunConfig, engine: EngineSpec, run_dir: RunDir, pinned: dict[str, Any],
               launch_index: int = 0) -> Deployment:
        self.teardown(config, engine.name, run_dir)  # a retry replaces what an earlier try started
        if engine.launcher == "external":
            dep = Deployment(engine.name, engine.endpoint.rstrip("/"), pinned["image_digest"], pinned["identity"], {})
            dep.save(run_dir)
            return dep
        launcher = launcher_for(engine.launcher)
        port = free_port()
        spec = launcher.command(config, engine, port)
        log_path = run_dir.node_dir("logs") / f"{engine.name}.log"
        # outlives this task; teardown stops the whole group
        # DAYONE_LAUNCH: the start's index (measurement.launches); the simulator draws launch_speed_sd from it
        proc = start_group(spec.argv, log_path, {**spec.env, "DAYONE_LAUNCH": str(launch_index)},
                           cwd=Path(__file__).resolve().parents[2])
        dep = Deployment(
            engine=engine.name,
            base_url=f"http://127.0.0.1:{port}",
            image_digest=pinned["image_digest"],
            identity=pinned["identity"],
            handle={"pid": proc.pid, "port": port, "log": str(log_path), "launcher": engine.launcher,
                    "node": this_node(), "launch_index": launch_index},
        )
        dep.save(run_dir)
        return dep

    def wait_ready(self, config: RunConfig, deployment: Deployment, timeout_s: float,
                   access: EndpointAccess | None = None) -> Readiness:
        _on_this_node(deployment)
        pid = deployment.handle.get("pid")

        async def platform() -> Platform:
            if pid and not alive(int(pid)):
                return Platform(failed=f"process exited before it was ready; see its log {deployment.handle.get('log')}")
            return UP

        adapter = adapter_for(config.engine(deployment.engine).dialect)
        return asyncio.run(wait_until_serving(deployment.engine, adapter, deployment.base_url, config.model.name,
                                              platform=platform, timeout_s=timeout_s, interval_s=0.25, access=access))

    def restart_count(self, deployment: Deployment) -> int | None:
        launcher = deployment.handle.get("launcher")
        if launcher in (None, "external"):
            return None
        _on_this_node(deployment)
        return launcher_for(launcher).restart_count(deployment.base_url)

    def restart_causes(self, deployment: Deployment) -> list[dict[str, Any]]:
        """A local supervisor tells a restart's count, not its cause."""
        return []

    def startup_log(self, deployment: Deployment) -> str:
        _on_this_node(deployment)
        path = deployment.handle.get("log")
        if not path or not Path(path).exists():
            return ""
        return Path(path).read_text(encoding="utf-8", errors="replace")[-2_000_000:]

    def hardware(self, config: RunConfig, deployment: Deployment) -> dict[str, Any]:
        """What this machine reports for the engine's process: its GPUs (as the engine's
        CUDA_VISIBLE_DEVICES narrows them), else its CPU model and cores."""
        from tasks.evidence.hardware import empty_record, local_machine

        if deployment.handle.get("launcher") in (None, "external"):
            return empty_record()  # an external engine runs where DayOne cannot see
        _on_this_node(deployment)
        return local_machine(deployment.handle["node"], config.engine(deployment.engine).env)

    def teardown(self, config: RunConfig, engine: str, run_dir: RunDir) -> None:
        dep = Deployment.load(run_dir, engine)
        if not dep or "pid" not in dep.handle:
            return
        _on_this_node(dep)  # a pid means nothing on another machine
        stop_group(int(dep.handle["pid"]))
