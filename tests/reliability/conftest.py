"""Fixtures of the reliability suite: the DAG, and an S3 server this suite may stop and start.

The S3 server here carries planted credentials (so the secrets test can grep for them) and is
owned by this suite alone, so stopping it for an outage disturbs no other test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rel_helpers import PLANTED_ACCESS_KEY, PLANTED_SECRET_KEY, REPO


@pytest.fixture(scope="session")
def planted_s3(tmp_path_factory: pytest.TempPathFactory):
    """A real S3 server (SeaweedFS) whose credentials are the planted ones."""
    from tasks.state.local_s3 import SeaweedS3

    server = SeaweedS3(tmp_path_factory.mktemp("seaweed-planted"), access_key=PLANTED_ACCESS_KEY,
                       secret_key=PLANTED_SECRET_KEY)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def isolated_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "runs"
    monkeypatch.setenv("DAYONE_WORKDIR", str(root))
    yield root


@pytest.fixture
def apiserver():
    """The local Kubernetes REST API of tests/k8s (objects in memory, bearer-token auth)."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "k8s"))
    from fake_apiserver import FakeApiServer

    server = FakeApiServer()
    yield server
    server.close()


@pytest.fixture
def kube_conn_id(apiserver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An Airflow Kubernetes connection whose kubeconfig points at the local API server."""
    import json

    import yaml

    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(apiserver.kubeconfig()))
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_RELIABILITY",
                       json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(path)}}))
    return "kubernetes_reliability"
