"""The real OpenWebUI, started from its own virtual environment on a loopback port, offline, with a
data directory of its own per engine (the engine's URL is stored in its database at first start)."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tasks.core.polling import TimedOut, poll
from tasks.config.openwebui import OPENWEBUI_VERSION, offline_settings, serve_argv, tls_settings
from tasks.core.ports import free_port
from tasks.core.processes import start_group, stop_group

# Built once by `make openwebui-venv` at a machine path keyed by the version, shared by every clone.
DEFAULT_VENV = (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dayone"
                / f"openwebui-{OPENWEBUI_VERSION}")
VENV_ENV = "DAYONE_OPENWEBUI_VENV"


class OpenWebUIError(RuntimeError):
    pass


def venv_path(configured: str | None = None) -> Path:
    """The OpenWebUI environment: the config's, else DAYONE_OPENWEBUI_VENV, else `make openwebui-venv`'s."""
    path = Path(configured or os.environ.get(VENV_ENV) or DEFAULT_VENV)
    if not (path / "bin" / "python").exists() or (path == DEFAULT_VENV and not (path / ".installed").exists()):
        raise OpenWebUIError(f"no OpenWebUI environment at {path}: build it with `make openwebui-venv` "
                             f"(or set scenarios.openwebui.venv / {VENV_ENV})")
    return path




def offline_env(data_dir: Path, engine_v1_url: str, api_key: str | None, secret_key: str,
                ca_bundle: str | None = None, verify: bool = True) -> dict[str, str]:
    """The local process's environment: the shared settings, its data directory, keys and the engine's TLS trust."""
    return {
        **offline_settings(engine_v1_url),
        **tls_settings(ca_bundle, verify),
        "FROM_INIT_PY": "true",  # as `open-webui serve` sets it: the pip package's bundled front end and static files
        "DATA_DIR": str(data_dir),
        "WEBUI_SECRET_KEY": secret_key,
        "OPENAI_API_KEYS": api_key or "none",
    }


@dataclass
class OpenWebUI:
    base_url: str
    data_dir: Path
    log_path: Path
    pid: int
    started_s: float  # from start to healthy
    admin_password: str | None = None  # None: DayOne signs up as the first user

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(no OpenWebUI log: {exc})"


@contextmanager
def running_openwebui(venv: Path, data_dir: Path, engine_v1_url: str, api_key: str | None = None,
                      timeout_s: float = 240.0, secret_key: str | None = None, ca_bundle: str | None = None,
                      verify: bool = True) -> Iterator[OpenWebUI]:
    """Start OpenWebUI against `engine_v1_url` (trusting `ca_bundle`, or checking no certificate without
    `verify`), wait until /health answers, stop its process group after."""
    if ca_bundle and not Path(ca_bundle).is_file():  # OpenWebUI would ignore it silently, then fail to verify
        raise OpenWebUIError(f"the engine's tls_ca_bundle {ca_bundle} is not a file OpenWebUI can read")
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = data_dir / "openwebui.log"
    env = offline_env(data_dir, engine_v1_url, api_key, secret_key or secrets.token_hex(16), ca_bundle, verify)
    started = time.monotonic()
    proc = start_group(serve_argv(str(venv / "bin" / "python"), "127.0.0.1", port), log_path, env=env, cwd=data_dir)
    ui = OpenWebUI(f"http://127.0.0.1:{port}", data_dir, log_path, proc.pid, 0.0)
    try:
        _wait_healthy(ui, proc, timeout_s)
        ui.started_s = round(time.monotonic() - started, 3)
        yield ui
    finally:
        stop_group(proc.pid)


def _wait_healthy(ui: OpenWebUI, proc: subprocess.Popen, timeout_s: float) -> None:
    def healthy() -> bool | None:
        if proc.poll() is not None:
            raise OpenWebUIError(f"OpenWebUI exited with {proc.returncode} before it was healthy:\n{ui.log_tail()}")
        try:
            return True if httpx.get(ui.base_url + "/health", timeout=5).status_code == 200 else None
        except httpx.HTTPError:
            return None

    try:
        poll(healthy, timeout_s=timeout_s, interval_s=0.5)
    except TimedOut:
        raise OpenWebUIError(f"OpenWebUI not healthy after {timeout_s:.0f} s:\n{ui.log_tail()}") from None
