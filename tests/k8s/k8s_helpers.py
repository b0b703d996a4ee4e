"""Shared helpers of the Kubernetes tests (fixtures live in conftest.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tasks.config import RunConfig, parse_run_config

CONN_ID = "kubernetes_fake"
MODEL = "glm-5.3-flash"
DIGESTS = {"sglang": "sha256:" + "1" * 64, "vllm": "sha256:" + "2" * 64}


def run_config(run_id: str = "run-1", engines: tuple[str, ...] = ("sglang", "vllm"), **k8s: Any) -> RunConfig:
    return parse_run_config(
        {
            "run_id": run_id,
            "target": "kubernetes",
            "model": {"name": MODEL, "path": "/models/glm", "context_limit_tokens": 1_048_576},
            "engines": [
                {"name": e, "dialect": e, "image": f"example.org/{e}:day1", "digest": DIGESTS[e], "gpus": 4,
                 "node": "h20-node-1"}
                for e in engines
            ],
            "kubernetes": {"namespace": "bench", "conn_id": CONN_ID, "startup_timeout_s": 1800, **k8s},
        }
    )


def later(delay_s: float, action: Callable[[], None]) -> threading.Thread:
    """Play the cluster: do `action` after `delay_s`, while the code under test waits."""
    def go() -> None:
        time.sleep(delay_s)
        action()

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t
