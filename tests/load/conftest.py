"""Shared helpers: a StepContext over a running simulator and a fresh run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tasks.config import parse_run_config
from tasks.context import StepContext, endpoint_for
from tasks.staging import RunDir


@pytest.fixture
def make_ctx(tmp_path: Path):
    def make(url: str, dialect: str = "sglang", **config: Any) -> StepContext:
        doc = {"run_id": "test-run", "engines": [{"name": "sim", "dialect": dialect}], **config}
        cfg = parse_run_config(doc)
        return StepContext(cfg, endpoint_for(cfg, "sim", url, "sha256:" + "0" * 64), RunDir("test-run", root=tmp_path))

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
