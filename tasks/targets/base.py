"""Where engines run. A target deploys an engine, tells when it serves, and tears it down.

The DAG sees the same lifecycle for every target: pin -> deploy -> wait ready -> ... -> teardown.
A Deployment is plain JSON, saved in the run directory so any later task (or a retry) finds it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from tasks.config import RunConfig
from tasks.config.engines import EngineSpec
from tasks.engines.access import EndpointAccess
from tasks.engines import Readiness
from tasks.state.storage import RunDir
from tasks.state.documents import deployment_doc


@dataclass
class Deployment:
    engine: str
    base_url: str
    image_digest: str  # platform digest (kubernetes) or a hash of the local identity
    identity: dict[str, Any] = field(default_factory=dict)  # goes to the manifest, desensitized
    handle: dict[str, Any] = field(default_factory=dict)  # target-specific: pid, port / namespace, names

    def save(self, run_dir: RunDir) -> None:
        run_dir.write_json(deployment_doc(self.engine), asdict(self))

    @classmethod
    def load(cls, run_dir: RunDir, engine: str) -> Deployment | None:
        doc = run_dir.read_json(deployment_doc(engine))
        return cls(**doc) if doc else None


def identity_digest(identity: dict[str, Any]) -> str:
    """A stable digest for an engine with no image (a local process): same identity, same digest."""
    blob = json.dumps(identity, sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


@dataclass(frozen=True)
class LaunchSpec:
    """How a local launcher starts its engine process."""

    argv: list[str]
    env: dict[str, str]


class Launcher(Protocol):
    """A kind of local engine process (the simulator, llama.cpp's server)."""

    def identity(self, config: RunConfig, engine: EngineSpec) -> dict[str, Any]: ...

    def command(self, config: RunConfig, engine: EngineSpec, port: int, host: str = "127.0.0.1") -> LaunchSpec: ...

    def restart_count(self, base_url: str) -> int | None: ...


class Target(Protocol):
    name: str

    def pin(self, config: RunConfig, engine: EngineSpec) -> dict[str, Any]:
        """The engine's identity before anything starts: digests, or command line and version."""

    def deploy(self, config: RunConfig, engine: EngineSpec, run_dir: RunDir, pinned: dict[str, Any],
               launch_index: int = 0) -> Deployment:
        """Start the engine afresh (what an earlier start left is removed first); `launch_index` numbers
        the starts of one engine within a scenario (measurement.launches), recorded in the handle."""

    def wait_ready(self, config: RunConfig, deployment: Deployment, timeout_s: float,
                   access: EndpointAccess | None = None) -> Readiness:
        ...

    def restart_count(self, deployment: Deployment) -> int | None:
        ...

    def restart_causes(self, deployment: Deployment) -> list[dict[str, Any]]:
        """Why the engine restarted, where the platform says (tasks/k8s/rollout.py `restart_causes`)."""

    def startup_log(self, deployment: Deployment) -> str:
        ...

    def hardware(self, config: RunConfig, deployment: Deployment) -> dict[str, Any]:
        """Where the engine runs, as the platform knows it (tasks/telemetry/hardware.py record)."""

    def teardown(self, config: RunConfig, engine: str, run_dir: RunDir) -> None:
        """Remove what deploy made; idempotent, and safe when deploy never ran."""
