"""A local Kubernetes REST API, an Airflow connection to it, and a simulated engine behind the Service.

The API client is the provider's own: KubernetesHook (sync, `kubernetes`) and AsyncKubernetesHook
(`kubernetes_asyncio`), configured from an Airflow connection whose kubeconfig points at the
local server, exactly as production points one at a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tasks.state.storage import RunDir
from fake_apiserver import FakeApiServer

from k8s_helpers import CONN_ID, MODEL


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    yield server
    server.close()


@pytest.fixture
def kube_conn(apiserver: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(apiserver.kubeconfig()))
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(path)}}),
    )
    return CONN_ID


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    """The engine the Service fronts: DayOne's simulator speaking SGLang's dialect."""
    from tasks.sim.process import start_sim

    sim = start_sim("sglang", {"model": MODEL})
    yield sim.url
    sim.stop()


@pytest.fixture
def run_dir(tmp_path: Path) -> RunDir:
    return RunDir("run-1", root=tmp_path / "runs")
