"""Contexts with a capacity search configured: over DayOne's simulator, or over rounds of known
goodput shares standing in for an engine (the search's bookkeeping alone)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.scenarios.warmup import reset_shapes
from tasks.sim.process import SimProcess, start_sim
from tasks.state.storage import RunDir

DIGEST = "sha256:" + "0" * 64
# Fast requests: 32 output tokens 10 ms apart; the knee's factor 3 makes TPOT 30 ms, the SLO is 20 ms.
# 31 gaps: a client stall must pass 310 ms on a stream's last token to push a good request over the SLO
# (8 tokens: 70 ms, which a loaded suite's stall reached, failing every request in flight at once).
FAST = {"ttft_base_s": 0.005, "itl_s": 0.01}
SLO = {"tpot_s": 0.02}
OUTPUT_TOKENS = 32


@contextmanager
def capacity_context(root: Path, profile: dict[str, Any], capacity: dict[str, Any],
                     slo: dict[str, Any] | None = None, warmup: bool = False) -> Iterator[tuple[SimProcess, EngineContext]]:
    with start_sim("sglang", {**FAST, **profile}) as sim:
        config = parse_run_config({
            "run_id": "capacity-run",
            "engines": [{"name": "sim", "dialect": "sglang"}],
            "scenarios": {"capacity": {"enabled": True, "input_tokens": 16, "output_tokens": OUTPUT_TOKENS,
                                       **capacity},
                          "warmup": warmup},
            "slo": SLO if slo is None else slo,
            "request_timeout_s": 30,
        })
        ctx = EngineContext(config, endpoint_for(config, "sim", sim.url, DIGEST), RunDir("capacity-run", root=root))
        reset_shapes(ctx.run_dir, "sim")  # a fresh deploy: no shape seen
        yield sim, ctx


# ---- rounds of known shares instead of an engine --------------------------------------------------


@dataclass
class Result:
    good: bool
    gone: bool = False  # the connection failed: no HTTP status at all

    def row_fields(self) -> dict[str, Any]:
        ttft = 0.01 if self.good else 5.0
        if self.gone:
            return {"request_id": "r", "status": "error", "http_status": None, "error": "Connection refused",
                    "send_ts": 1.0}
        return {"request_id": "r", "status": "ok", "http_status": 200, "ttft_s": ttft, "first_event_s": ttft,
                "e2e_s": ttft + 0.1, "tpot_s": 0.01, "send_ts": 1.0}


def fake_context(root: Path, engine: str = "fake", slo: dict[str, Any] | None = None, **search: Any) -> EngineContext:
    """A context whose engine is never reached (run_round is replaced): SLO TTFT 0.5 s by default."""
    cfg = parse_run_config({
        "run_id": "probe-rounds", "engines": [{"name": engine, "dialect": "openai"}],
        "slo": {"ttft_s": 0.5} if slo is None else slo,
        "scenarios": {"warmup": False, "capacity": {"enabled": True, "requests_per_round": 40, **search}},
    })
    return EngineContext(cfg, endpoint_for(cfg, engine, "http://127.0.0.1:9", DIGEST), RunDir("probe-rounds", root=root))
