"""Fixtures: a real llama.cpp server started through DayOne's local target (see llamacpp_helpers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llamacpp_helpers import RunningEngine, llamacpp_config, running_engine


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
