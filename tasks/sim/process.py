"""The simulator as a subprocess of tests and benchmarks (its own process group, on 127.0.0.1), and its ground
truth read over HTTP. The launcher lives apart from the package so the server's own process loads none of it.

``with start_sim("vllm", {"slots": 4}) as sim: httpx.get(sim.url + "/v1/models")``
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from tasks.core.polling import TimedOut, poll
from tasks.core.ports import free_port
from tasks.core.processes import start_group, stop_group

_ROOT = Path(__file__).resolve().parents[2]


class SimError(RuntimeError):
    """The simulator process did not start or exited; the message carries its log tail."""


class SimProcess:
    """A simulator running as a subprocess (its own process group) on 127.0.0.1."""

    def __init__(self, proc: subprocess.Popen[bytes], dialect: str, port: int, log_path: Path):
        self.proc = proc
        self.dialect = dialect
        self.port = port
        self.pid = proc.pid
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path

    # ---- lifecycle ---------------------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _raise_if_exited(self) -> None:
        if not self.alive():
            raise SimError(f"simulator exited with code {self.proc.returncode}:\n{self.log()[-2000:]}")

    def wait_ready(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Wait until /sim/state says ready; raises SimError if the process exits or time runs out."""
        last = "no answer yet"

        def ready_state() -> dict[str, Any] | None:
            nonlocal last
            self._raise_if_exited()
            try:
                state = self.state(timeout_s=2)
            except (httpx.HTTPError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                return None
            if state.get("ready"):
                return state
            last = "not ready"
            return None

        try:
            return poll(ready_state, timeout_s=timeout_s, interval_s=0.05)
        except TimedOut:
            raise SimError(f"simulator not ready after {timeout_s} s ({last}):\n{self.log()[-2000:]}") from None

    def wait_listening(self, timeout_s: float = 30.0) -> None:
        def answers() -> bool | None:
            self._raise_if_exited()
            try:
                self.state(timeout_s=2)
                return True
            except (httpx.HTTPError, ValueError):
                return None

        try:
            poll(answers, timeout_s=timeout_s, interval_s=0.05)
        except TimedOut:
            raise SimError(f"simulator not listening after {timeout_s} s:\n{self.log()[-2000:]}") from None

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGTERM to the process group, SIGKILL after grace_s; returns the exit code."""
        code = stop_group(self.proc.pid, grace_s)
        self.proc.returncode = code if code is not None else self.proc.poll()
        return self.proc.returncode

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- ground truth -------------------------------------------------------------------------
    def state(self, timeout_s: float = 10.0) -> dict[str, Any]:
        r = httpx.get(self.url + "/sim/state", timeout=timeout_s)
        r.raise_for_status()
        return r.json()

    def restart_count(self) -> int:
        return int(self.state()["restarts"])

    def requests(self, request_id: str | None = None, prefix: str | None = None) -> list[dict[str, Any]]:
        """Ground truth rows (GET /sim/requests), all or those of one request id or id prefix."""
        params = {k: v for k, v in (("request_id", request_id), ("prefix", prefix)) if v}
        r = httpx.get(self.url + "/sim/requests", params=params, timeout=30)
        r.raise_for_status()
        return r.json()

    def clear_requests(self) -> int:
        """Forget the ground truth so far; returns how many rows were dropped."""
        r = httpx.delete(self.url + "/sim/requests", timeout=10)
        r.raise_for_status()
        return int(r.json()["dropped"])

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""


def start_sim(
    dialect: str = "sglang",
    profile: dict[str, Any] | None = None,
    port: int = 0,
    *,
    wait_ready: bool = True,
    timeout_s: float = 30.0,
    cpus: list[int] | None = None,
    log_path: str | Path | None = None,
) -> SimProcess:
    """Start `python -m tasks.sim` on 127.0.0.1 (port 0: a free one) and, by default, wait until ready.

    cpus pins the process to those CPU cores (benchmarks). The process's stdout and stderr go to
    log_path (a temporary file by default), readable with SimProcess.log().
    """
    port = port or free_port()
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix=f"dayone-sim-{dialect}-", suffix=".log")
        os.close(fd)
        log_path = name
    log_path = Path(log_path)
    argv = [sys.executable, "-m", "tasks.sim", "--dialect", dialect, "--host", "127.0.0.1", "--port", str(port),
            "--profile-json", json.dumps(profile or {})]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    sim = SimProcess(start_group(argv, log_path, cwd=_ROOT, preexec_fn=pin), dialect, port, log_path)
    if wait_ready:
        try:
            sim.wait_ready(timeout_s)
        except SimError:
            sim.stop()
            raise
    return sim


__all__ = ["SimError", "SimProcess", "start_sim"]
