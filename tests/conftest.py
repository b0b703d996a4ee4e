"""Shared fixtures: an Airflow home on SQLite, a real S3 server (SeaweedFS), a clean run directory.

Airflow reads its configuration at import, so the environment is set here, before any test module
imports airflow.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_HOME = Path(tempfile.mkdtemp(prefix="dayone-airflow-"))
os.environ.setdefault("AIRFLOW_HOME", str(_HOME))
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
os.environ.setdefault("DAYONE_WORKDIR", str(_HOME / "runs"))
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
if str(REPO / "plugins") not in sys.path:
    sys.path.insert(0, str(REPO / "plugins"))


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """`airflow db migrate` once per session, on SQLite in a temporary AIRFLOW_HOME."""
    home = Path(os.environ["AIRFLOW_HOME"])
    marker = home / ".migrated"
    if not marker.exists():
        subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True,
                       env=os.environ.copy(), timeout=300)
        marker.touch()
    return home


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """A real S3-compatible server (SeaweedFS `weed mini`) on free loopback ports."""
    from tasks.devstack import SeaweedS3

    server = SeaweedS3(tmp_path_factory.mktemp("seaweed"))
    server.start()
    yield server
    server.stop()


@pytest.fixture()
def s3_conn(s3_server, monkeypatch: pytest.MonkeyPatch):
    """The `dayone_s3` Airflow connection pointing at the test S3 server."""
    monkeypatch.setenv("AIRFLOW_CONN_DAYONE_S3", s3_server.connection_uri())
    return s3_server


@pytest.fixture()
def run_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh DAYONE_WORKDIR for one test."""
    root = tmp_path / "runs"
    monkeypatch.setenv("DAYONE_WORKDIR", str(root))
    return root
