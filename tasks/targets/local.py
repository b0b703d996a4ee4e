"""The local target: the engine runs as a process on one machine (a node), on a free port.

Same lifecycle as a Kubernetes deployment: deploy starts a detached process (it outlives the
task that started it), wait_ready polls the adapter's readiness, teardown stops the process group.

The engine listens on this node's address, DAYONE_ENGINE_HOST (unset: 127.0.0.1, this machine only),
and every step reaches it there. Its process, port and log are node-local by nature, so the engine runs
under a keeper (tasks/targets/keeper.py) that mirrors its log and its exit into the run's state and stops
it when the run state asks. The deployment records its node (a hash of the host name): a step on that node
reads the pid and the log from its own disk; a step on any other node (a Celery worker with the run state
in S3) never does: it reads the keeper's copies in the run state, reaches the engine at its endpoint, and
tears it down by a stop request the keeper answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import uuid
from pathlib import Path
from typing import Any

from tasks.config import RunConfig
from tasks.config.engines import EngineSpec
from tasks.core.desensitize import recorded_env
from tasks.engines.access import EndpointAccess
from tasks.engines import Readiness, adapter_for
from tasks.core.polling import TimedOut, poll
from tasks.core.ports import free_port
from tasks.core.processes import alive, stop_group
from tasks.engines.readiness import UP, Platform, wait_until_serving
from tasks.state.storage import RunDir
from tasks.state.documents import engine_log_doc, keeper_orders_doc
from tasks.targets.base import Deployment, Launcher, identity_digest
from tasks.engines.readiness import DeployError
from tasks.targets.keeper import exit_record, fresh_log, request_stop, start_kept
from tasks.targets.llamacpp import LlamaCppLauncher
from tasks.targets.sim import SimLauncher
from tasks.targets.venv_engine import ENGINES as VENV_ENGINES, VenvEngineLauncher


ENGINE_HOST_ENV = "DAYONE_ENGINE_HOST"  # this node's address, where its local engines listen and are reached
REMOTE_STOP_S = 30.0  # a teardown on another node waits this long for the keeper to confirm the stop


def this_node() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:12]


def engine_host() -> str:
    return os.environ.get(ENGINE_HOST_ENV) or "127.0.0.1"


def _deployed_here(deployment: Deployment) -> bool:
    """Whether this node started the engine: only then are its pid and log file this node's to read."""
    return deployment.handle.get("node") in (None, this_node())


def launcher_for(launcher: str | None) -> Launcher:
    if launcher == "sim":
        return SimLauncher()
    if launcher == "llamacpp":
        return LlamaCppLauncher()
    if launcher in VENV_ENGINES:
        return VenvEngineLauncher(launcher)
    raise DeployError(f"no launcher {launcher!r} for target local")


class LocalTarget:
    name = "local"

    def __init__(self, run_dir: RunDir | None = None):
        self.run_dir = run_dir  # the run's state: what a step on another node reads instead of that node's disk

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
        port, host = free_port(), engine_host()
        spec = launcher.command(config, engine, port, host)
        log_path = run_dir.node_dir("logs") / f"{engine.name}.log"
        start_id = uuid.uuid4().hex[:12]
        # outlives this task; teardown stops the whole group, from this node or through the run state
        # DAYONE_LAUNCH: the start's index (measurement.launches); the simulator draws launch_speed_sd from it
        proc = start_kept(run_dir, engine.name, start_id, spec.argv, {**spec.env, "DAYONE_LAUNCH": str(launch_index)},
                          log_path,
                          cwd=Path(__file__).resolve().parents[2])
        from tasks.telemetry.hardware import local_machine

        dep = Deployment(
            engine=engine.name,
            base_url=f"http://{host}:{port}",
            image_digest=pinned["image_digest"],
            identity=pinned["identity"],
            handle={"pid": proc.pid, "port": port, "log": str(log_path), "launcher": engine.launcher,
                    "node": this_node(), "start_id": start_id, "machine": local_machine(this_node(), engine.env),
                    "launch_index": launch_index},
        )
        dep.save(run_dir)
        return dep

    def _exited(self, deployment: Deployment) -> str | None:
        """How the engine's process ended, None while it runs: its pid on its own node, its keeper's record
        in the run state elsewhere."""
        if _deployed_here(deployment):
            pid = deployment.handle.get("pid")
            return "it exited" if pid and not alive(int(pid)) else None
        ended = self.run_dir and exit_record(self.run_dir, deployment.engine, deployment.handle.get("start_id", ""))
        return f"it {ended['how']} with code {ended['returncode']}" if ended else None

    def wait_ready(self, config: RunConfig, deployment: Deployment, timeout_s: float,
                   access: EndpointAccess | None = None) -> Readiness:
        async def platform() -> Platform:
            if exited := self._exited(deployment):
                return Platform(failed=f"process exited before it was ready ({exited}); see its log "
                                       f"{self._log_where(deployment)}")
            return UP

        adapter = adapter_for(config.engine(deployment.engine).dialect)
        return asyncio.run(wait_until_serving(deployment.engine, adapter, deployment.base_url, config.model.name,
                                              platform=platform, timeout_s=timeout_s, interval_s=0.25, access=access))

    def restart_count(self, deployment: Deployment) -> int | None:
        launcher = deployment.handle.get("launcher")
        if launcher in (None, "external"):
            return None
        return launcher_for(launcher).restart_count(deployment.base_url)  # asked at the endpoint, from any node

    def _log_where(self, deployment: Deployment) -> str:
        if _deployed_here(deployment) or self.run_dir is None:
            return str(deployment.handle.get("log"))
        return self.run_dir.where(engine_log_doc(deployment.engine))

    def restart_causes(self, deployment: Deployment) -> list[dict[str, Any]]:
        """A local supervisor tells a restart's count, not its cause."""
        return []

    def startup_log(self, deployment: Deployment) -> str:
        if not _deployed_here(deployment):
            if self.run_dir is None:
                raise DeployError(f"engine {deployment.engine}: its log is on another node, and no run state was given")
            return fresh_log(self.run_dir, deployment.engine, deployment.handle.get("start_id", ""))
        path = deployment.handle.get("log")
        if not path or not Path(path).exists():
            return ""
        return Path(path).read_text(encoding="utf-8", errors="replace")[-2_000_000:]

    def hardware(self, config: RunConfig, deployment: Deployment) -> dict[str, Any]:
        """What this machine reports for the engine's process: its GPUs (as the engine's
        CUDA_VISIBLE_DEVICES narrows them), else its CPU model and cores."""
        from tasks.telemetry.hardware import empty_record, local_machine

        if deployment.handle.get("launcher") in (None, "external"):
            return empty_record()  # an external engine runs where DayOne cannot see
        if "machine" in deployment.handle:  # recorded by its node at deploy
            return deployment.handle["machine"]
        if not _deployed_here(deployment):
            return empty_record()
        return local_machine(deployment.handle["node"], config.engine(deployment.engine).env)

    def teardown(self, config: RunConfig, engine: str, run_dir: RunDir) -> None:
        dep = Deployment.load(run_dir, engine)
        if not dep or "pid" not in dep.handle:
            return
        if _deployed_here(dep):
            stop_group(int(dep.handle["pid"]))
            return
        # a pid means nothing on another node: ask the engine's keeper, through the run state
        start_id = dep.handle.get("start_id", "")
        if exit_record(run_dir, engine, start_id):
            return
        request_stop(run_dir, engine, start_id)
        try:
            poll(lambda: exit_record(run_dir, engine, start_id), timeout_s=REMOTE_STOP_S, interval_s=0.25)
        except TimedOut:
            raise DeployError(f"engine {engine}: its node's keeper did not confirm the stop requested at "
                              f"{run_dir.where(keeper_orders_doc(engine))} within {REMOTE_STOP_S:.0f} s") from None
