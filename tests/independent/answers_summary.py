"""A run summary whose answers were measured from plain servers (quality_server.py), for the tests of how
answers rank against speed; the other evidence is set by each test as the summary states it."""

from __future__ import annotations

from plain_server import MODEL

from tasks.config import RunConfig, parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.quality.run import run_quality
from tasks.report.schema.comparison import Comparison
from tasks.report.summary import RunSummary, build_summary
from tasks.state.storage import RunDir

ITEMS_PER_FAMILY = 8


def answers_summary(tmp_path, servers, run_id: str, purposes=None) -> tuple[RunSummary, RunConfig]:  # noqa: ANN001
    """The summary of a run whose quality step asked each server (engine name -> server class) the same items."""
    config = parse_run_config({
        "run_id": run_id,
        "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [{"name": name, "dialect": "vllm"} for name in servers],
        "scenarios": {"quality": {"enabled": True, "items_per_family": ITEMS_PER_FAMILY, "kv_context_tokens": [64]},
                      "long_context": {"enabled": False}, "boundary": {"enabled": False}},
        "request_timeout_s": 30,
        **({"choice": {"purposes": purposes}} if purposes else {}),
    })
    run_dir = RunDir(run_id, root=tmp_path)
    for name, server_cls in servers.items():
        with server_cls() as server:
            run_quality(EngineContext(config, endpoint_for(config, name, server.url, "sha256:" + "0" * 64), run_dir))
    return build_summary(run_dir, config), config


def throughput_comparison(engine: str, base: str, verdict: str = "better") -> Comparison:
    """A detected throughput difference of `engine` against `base`, as the summary's comparisons state one."""
    ratio, low, high = (1.5, 1.3, 1.7) if verdict == "better" else (0.6, 0.5, 0.7)
    return Comparison(scenario="short", level="c=4", figure="output_tps", base=base, engine=engine, ratio=ratio,
                      low=low, high=high, confidence=0.95, verdict=verdict, detectable=0.1, rounds_needed_for_5pct=12)
