"""A StepContext against DayOne's simulator on a free loopback port, with a small context limit
so needle prompts stay short and fast."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tasks.config import parse_run_config
from tasks.context import StepContext, endpoint_for
from tasks.sim import SimProcess, start_sim
from tasks.staging import RunDir

CONTEXT_LIMIT = 4096
# Lengths that fit CONTEXT_LIMIT (the defaults are for million-token models).
SMALL_SCENARIOS = {
    "long_context": {"lengths": [1000, 2000]},
    "boundary": {"lengths": [3000, 3500]},
    "prefix_cache": {"prompt_tokens": 2000},
}
DIGEST = "sha256:" + "0" * 64


@contextmanager
def sim_context(
    root: Path, dialect: str = "sglang", profile: dict[str, Any] | None = None,
    scenarios: dict[str, Any] | None = None, run_id: str = "test-run",
) -> Iterator[tuple[SimProcess, StepContext]]:
    profile = {"context_limit": CONTEXT_LIMIT, **(profile or {})}
    with start_sim(dialect, profile) as sim:
        config = parse_run_config({
            "run_id": run_id,
            "model": {"context_limit_tokens": CONTEXT_LIMIT},
            "engines": [{"name": f"sim-{dialect}", "dialect": dialect}],
            "scenarios": {**SMALL_SCENARIOS, **(scenarios or {})},
            "request_timeout_s": 30,
        })
        endpoint = endpoint_for(config, f"sim-{dialect}", sim.url, DIGEST)
        yield sim, StepContext(config, endpoint, RunDir(run_id, root=root))


@pytest.fixture()
def sim_ctx(tmp_path: Path):
    """Factory: `with sim_ctx("vllm", {"dev_mode": True}) as (sim, ctx): ...`."""
    return lambda *args, **kwargs: sim_context(tmp_path, *args, **kwargs)
