"""Fixtures: a real llama.cpp server (llamacpp_helpers), and the real vLLM and SGLang (venv_engine_helpers), each
started through DayOne's local target."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llamacpp_helpers import RunningEngine, llamacpp_config, running_engine
from venv_engine_helpers import READY_TIMEOUT_S, venv_config


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    """SmolLM2-135M-Instruct (chat template included), two slots, for one test module."""
    config = llamacpp_config(
        {"model": "smollm2", "ctx_size": 2048, "parallel": 2, "temperature": 0},
        scenarios={
            "functional": {"skip": []},
            "short": {"input_tokens": 32, "output_tokens": 8, "concurrency": [1, 2], "rounds": 1,
                      "requests_per_round": 2},
            "prefix_cache": {"prompt_tokens": 256, "repeats": 2, "output_tokens": 4},
        },
    )
    with running_engine(tmp_path_factory.mktemp("smollm2"), config) as engine:
        yield engine


@pytest.fixture(scope="session")
def real_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    """vLLM 0.32's CPU build from its own environment, started once for the session (45-120 s)."""
    config = venv_config("vllm")
    with running_engine(tmp_path_factory.mktemp("vllm"), config, READY_TIMEOUT_S) as engine:
        yield engine


@pytest.fixture(scope="session")
def real_sglang(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    """SGLang 0.5.18's CPU backend from its own environment, started once for the session (30-120 s)."""
    config = venv_config("sglang")
    with running_engine(tmp_path_factory.mktemp("sglang"), config, READY_TIMEOUT_S) as engine:
        yield engine
