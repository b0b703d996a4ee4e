"""Helpers for the real-engine tests: llama.cpp's server (PyPI xllamacpp) with the PyPI-shipped GGUF models, started
through DayOne's local target exactly as the DAG does (pin, deploy, wait ready, teardown).

Sizes are small on purpose: the machine has 2 cores shared with other work, where a 1K-token
prompt can take 5-20 s to process. Nothing here is skipped when a part is missing: a missing
package or model fails the test with the fix in the message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.config import RunConfig, parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.state.storage import RunDir
from tasks.targets.base import Deployment
from tasks.targets.local import LocalTarget

SERVED_MODEL = "dayone-llamacpp"
READY_TIMEOUT_S = 90.0


def llamacpp_config(
    settings: dict[str, Any], scenarios: dict[str, Any] | None = None, context_limit: int = 2048, name: str = "llamacpp"
) -> RunConfig:
    return parse_run_config({
        "run_id": "realengine",
        "model": {"name": SERVED_MODEL, "context_limit_tokens": context_limit, "template_overhead_tokens": 32},
        "engines": [{"name": name, "dialect": "llamacpp", "launcher": "llamacpp", "llamacpp": settings}],
        "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False}, **(scenarios or {})},
        "request_timeout_s": 180,
    })


@dataclass
class RunningEngine:
    config: RunConfig
    target: LocalTarget
    deployment: Deployment
    run_dir: RunDir

    @property
    def base_url(self) -> str:
        return self.deployment.base_url

    def ctx(self) -> EngineContext:
        name = self.deployment.engine
        endpoint = endpoint_for(self.config, name, self.base_url, self.deployment.image_digest)
        return EngineContext(self.config, endpoint, self.run_dir)


@contextmanager
def running_engine(root: Path, config: RunConfig, ready_timeout_s: float = READY_TIMEOUT_S) -> Iterator[RunningEngine]:
    target = LocalTarget()
    engine = config.engines[0]
    run_dir = RunDir(config.run_id or "realengine", root=root)
    pinned = target.pin(config, engine)
    deployment = target.deploy(config, engine, run_dir, pinned)
    try:
        state = target.wait_ready(config, deployment, ready_timeout_s)
        assert state.ready, f"{engine.name} not ready: {state.stage} {state.detail}\n{target.startup_log(deployment)[-3000:]}"
        yield RunningEngine(config, target, deployment, run_dir)
    finally:
        target.teardown(config, engine.name, run_dir)
