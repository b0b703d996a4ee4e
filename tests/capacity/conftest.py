"""A StepContext over DayOne's simulator with a capacity search configured."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tasks.config import parse_run_config
from tasks.context import StepContext, endpoint_for
from tasks.scenarios.warmup import reset_shapes
from tasks.sim import SimProcess, start_sim
from tasks.staging import RunDir

DIGEST = "sha256:" + "0" * 64
# Fast requests: 8 output tokens 10 ms apart; the knee's factor 3 makes TPOT 30 ms, the SLO is 20 ms.
FAST = {"ttft_base_s": 0.005, "itl_s": 0.01}
SLO = {"tpot_s": 0.02}


@contextmanager
def capacity_context(root: Path, profile: dict[str, Any], capacity: dict[str, Any],
                     slo: dict[str, Any] | None = None, warmup: bool = False) -> Iterator[tuple[SimProcess, StepContext]]:
    with start_sim("sglang", {**FAST, **profile}) as sim:
        config = parse_run_config({
            "run_id": "capacity-run",
            "engines": [{"name": "sim", "dialect": "sglang"}],
            "scenarios": {"capacity": {"enabled": True, "input_tokens": 16, "output_tokens": 8, **capacity},
                          "warmup": warmup},
            "slo": SLO if slo is None else slo,
            "request_timeout_s": 30,
        })
        ctx = StepContext(config, endpoint_for(config, "sim", sim.url, DIGEST), RunDir("capacity-run", root=root))
        reset_shapes(ctx.run_dir, "sim")  # a fresh deploy: no shape seen
        yield sim, ctx


@pytest.fixture()
def capacity_ctx(tmp_path: Path):
    """Factory: `with capacity_ctx({"decode_knee": 12}, {"start": 3}) as (sim, ctx): ...`."""
    return lambda *args, **kwargs: capacity_context(tmp_path, *args, **kwargs)
