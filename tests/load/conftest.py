"""Shared helpers: a EngineContext over a running simulator and a fresh run directory, and the
independent reference server (bench/ref_server.py) in a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.state.storage import RunDir


@pytest.fixture
def make_ctx(tmp_path: Path):
    def make(url: str, dialect: str = "sglang", **config: Any) -> EngineContext:
        doc = {"run_id": "test-run", "engines": [{"name": "sim", "dialect": dialect}], **config}
        cfg = parse_run_config(doc)
        return EngineContext(cfg, endpoint_for(cfg, "sim", url, "sha256:" + "0" * 64), RunDir("test-run", root=tmp_path))

    return make


def short_scenario(concurrency: list[int], rounds: int, requests: int, output: int = 16, input_: int = 32) -> dict[str, Any]:
    return {
        "short": {
            "concurrency": concurrency,
            "rounds": rounds,
            "requests_per_round": requests,
            "input_tokens": input_,
            "output_tokens": output,
        }
    }


@pytest.fixture
def short():
    return short_scenario


@dataclass(frozen=True)
class RefServer:
    url: str
    ttft_s: float
    itl_s: float

    def log(self) -> dict[str, dict[str, Any]]:
        """The server's records by request id (see bench/ref_server.py)."""
        return json.loads(urllib.request.urlopen(self.url + "/log", timeout=10).read())


@pytest.fixture(scope="module")
def ref_server():
    ttft_s, itl_s = 0.02, 0.01
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parents[2] / "bench" / "ref_server.py"),
                             "--ttft", str(ttft_s), "--itl", str(itl_s)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("port "), line
        yield RefServer(f"http://127.0.0.1:{int(line.split()[1])}", ttft_s, itl_s)
    finally:
        proc.kill()
        proc.wait(10)
