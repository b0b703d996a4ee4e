"""`make ui`'s stack (dayone_airflow.ui) with a stub in place of `airflow standalone`.

The stub is what standalone's components are: a child process that resolves `dayone_s3` through Airflow
and archives through it. The stack must hand it a working connection to a real S3 server, keep the data
across a restart, stop the server when the child exits (shut down by SIGTERM, or dying on its own), and
leave a `dayone_s3` the user defined alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
CONN_ENV = "AIRFLOW_CONN_DAYONE_S3"
BUCKET, KEY = "ui-stack", "runs/probe.txt"

# argv: out.json, then "write" (archive, then wait for SIGINT) or "read" (read back, exit 3).
STUB = r"""
import json, os, signal, sys, time
out, mode = sys.argv[1], sys.argv[2]
report = {"conn_env": os.environ.get("AIRFLOW_CONN_DAYONE_S3"), "airflow_home": os.environ["AIRFLOW_HOME"],
          "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN}
if report["conn_env"] and "dayone-local" in report["conn_env"]:
    from airflow.models.connection import Connection
    from tasks.publish.archive import make_client
    conn = Connection.get_connection_from_secrets("dayone_s3")
    extra = conn.extra_dejson
    report["endpoint_url"] = extra["endpoint_url"]
    s3 = make_client(extra["endpoint_url"], conn.login, conn.password, extra.get("region_name"))
    if mode == "write":
        s3.create_bucket(Bucket="ui-stack")
        s3.put_object(Bucket="ui-stack", Key="runs/probe.txt", Body=b"archived")
    report["read"] = s3.get_object(Bucket="ui-stack", Key="runs/probe.txt")["Body"].read().decode()
if mode == "write":
    signal.signal(signal.SIGINT, lambda *a: (open(out + ".sigint", "w").close(), sys.exit(0)))
    open(out, "w").write(json.dumps(report))
    while True:
        time.sleep(0.1)
open(out, "w").write(json.dumps(report))
sys.exit(3)
"""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start(state: Path, stub: Path, out: Path, mode: str, **env: str) -> subprocess.Popen:
    """The stack as a shell starts a background job: SIGINT ignored, which its child must not inherit
    (standalone would then never shut down)."""
    base = {k: v for k, v in os.environ.items() if k != CONN_ENV and not k.startswith("AIRFLOW")}
    base["PYTHONPATH"] = str(REPO / "plugins")
    command = f"{sys.executable} {stub} {out} {mode}"
    return subprocess.Popen([sys.executable, "-m", "dayone_airflow.ui", "--state", str(state), "--command", command],
                            env={**base, **env}, cwd=REPO, preexec_fn=_ignore_sigint)


def _stop(ui: subprocess.Popen) -> None:
    """After a failed assertion: SIGTERM, so the stack still stops its S3 server and the stub."""
    if ui.poll() is None:
        ui.terminate()
        try:
            ui.wait(timeout=60)
        except subprocess.TimeoutExpired:
            ui.kill()


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, f"the ui stack exited with {proc.returncode} before the stub reported"
        assert time.monotonic() < deadline, "the stub never reported"
        time.sleep(0.2)
    time.sleep(0.2)  # the stub writes in one call; let it finish
    return json.loads(path.read_text())


def _weed_running(data_dir: Path) -> bool:
    """Whether a SeaweedFS process serves `data_dir` (its argv names the directory)."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if f"-dir={data_dir}".encode() in argv:
            return True
    return False


def _refuses(endpoint_url: str) -> bool:
    try:
        httpx.get(endpoint_url, timeout=2)
    except httpx.TransportError:
        return True
    return False


@pytest.fixture()
def stub(tmp_path: Path) -> Path:
    path = tmp_path / "stub.py"
    path.write_text(STUB)
    return path


def test_ui_stack_archives_through_its_s3_keeps_the_data_and_stops_s3_with_the_child(tmp_path, stub):
    state = tmp_path / "state"

    # Run 1: the child archives through dayone_s3; SIGTERM to the stack reaches it as SIGINT.
    out = tmp_path / "write.json"
    ui = _start(state, stub, out, "write")
    try:
        report = _wait_for(out, ui)
        assert report["read"] == "archived"
        assert not report["sigint_ignored"]
        assert report["airflow_home"] == str(state / "airflow")
        assert json.loads(report["conn_env"])["extra"]["endpoint_url"] == report["endpoint_url"]
        assert _weed_running(state / "s3")
        ui.send_signal(signal.SIGTERM)
        assert ui.wait(timeout=120) == 0
    finally:
        _stop(ui)
    assert Path(f"{out}.sigint").exists(), "the child was not shut down with SIGINT"
    assert not _weed_running(state / "s3")
    assert _refuses(report["endpoint_url"])

    # Run 2, a restart: the archived object is still there; the child dying stops S3 and sets the exit code.
    out = tmp_path / "read.json"
    ui = _start(state, stub, out, "read")
    try:
        assert ui.wait(timeout=120) == 3
    finally:
        _stop(ui)
    report = json.loads(out.read_text())
    assert report["read"] == "archived"
    assert not _weed_running(state / "s3")
    assert _refuses(report["endpoint_url"])


def test_a_dayone_s3_defined_in_the_environment_is_left_alone(tmp_path, stub):
    state = tmp_path / "state"
    mine = json.dumps({"conn_type": "aws", "login": "mine", "extra": {"endpoint_url": "https://s3.example"}})
    out = tmp_path / "read.json"
    ui = _start(state, stub, out, "read", **{CONN_ENV: mine})
    try:
        assert ui.wait(timeout=120) == 3
    finally:
        _stop(ui)
    assert json.loads(out.read_text())["conn_env"] == mine
    assert not (state / "s3").exists()  # no S3 server was started


def test_a_dayone_s3_in_the_metadata_db_counts_as_defined(airflow_db, monkeypatch):
    """`airflow connections add dayone_s3 ...` (or Admin -> Connections) before `make ui`: no local S3."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    from dayone_airflow.ui import archive_connection_defined

    monkeypatch.delenv(CONN_ENV, raising=False)
    assert not archive_connection_defined()
    with create_session() as session:
        session.add(Connection(conn_id="dayone_s3", conn_type="aws", login="mine"))
    try:
        assert archive_connection_defined()
    finally:
        with create_session() as session:
            session.query(Connection).filter(Connection.conn_id == "dayone_s3").delete()
    assert not archive_connection_defined()
