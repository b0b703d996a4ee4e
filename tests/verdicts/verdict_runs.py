"""Runs measured from plain servers written for these tests (tests/independent/plain_server.py), for the verdicts
of the choice by purpose and the nightly: a trace whose slow tail an engine may drop, an engine whose first round is
cold, and the run config and nights every such test writes the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plain_pipeline import external, scenarios
from plain_server import MODEL, PlainServer, prompt_token_count

from tasks.config import RunConfig, parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.state.storage import RunDir

DIGEST = "sha256:" + "a" * 64
ROWS = 50
GAP_S = 0.02  # between arrivals: 50 req/s
SLOW_LEN, DROPPED_LEN = 97, 98  # prompt tokens of the trace's slow tail (4 rows of 50: 8%), and of its half that a
# dropping engine fails (2 rows: 4%)
SLOW_S, FAST_S = 0.25, 0.01  # time to the first token, slow tail and the rest
# Purposes of the tests' own: latency read before throughput, and after it (the built-ins add criteria of others).
PURPOSES = [{"name": "latency_first", "order": ["latency", "throughput"]},
            {"name": "throughput_first", "order": ["throughput", "latency"]}]
# A generous lateness limit: the verdicts, not the client's pace on a loaded machine, are what these tests judge.
LATENESS_MAX_S = 1.0


def write_trace(path: Path) -> Path:
    """50 rows 20 ms apart (DayOne's format): rows 5, 15, 25 and 35 are the slow tail, 5 and 25 its dropped half;
    the last rows are fast, so the round's duration does not depend on the tail."""
    tail = {5: DROPPED_LEN, 15: SLOW_LEN, 25: DROPPED_LEN, 35: SLOW_LEN}
    rows = [{"arrival_s": round(i * GAP_S, 6), "input_tokens": tail.get(i, 20 + 5 * (i % 5)), "output_tokens": 2}
            for i in range(ROWS)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class TailServer(PlainServer):
    """Answers the trace's slow tail (prompts of SLOW_LEN or DROPPED_LEN tokens) after SLOW_S, the rest after
    FAST_S (`first_s` for every prompt, when given; `slow_tail` off: the tail too is fast); with `drops`, the
    DROPPED_LEN rows get HTTP 500 at once (the slowest 4% of the trace, under the 5% round error limit); with
    `jit_s`, a prompt length it has not seen before waits that long first (a shape compiled on first encounter:
    the trace's first round is cold, the next ones are not)."""

    def __init__(self, slow_tail: bool = True, drops: bool = False, first_s: float | None = None,
                 jit_s: float = 0.0) -> None:
        super().__init__()
        self.slow_tail, self.drops, self.first_s, self.jit_s = slow_tail, drops, first_s, jit_s
        self.lengths_seen: set[int] = set()
        self.failed = 0

    def first_token_delay_s(self, kind: str, prompt_tokens: int, max_tokens: int) -> float:
        jit = self.jit_s if prompt_tokens not in self.lengths_seen else 0.0
        self.lengths_seen.add(prompt_tokens)
        if self.first_s is not None:
            return jit + self.first_s
        return jit + (SLOW_S if self.slow_tail and prompt_tokens in (SLOW_LEN, DROPPED_LEN) else FAST_S)

    def error_for(self, kind: str, body: dict[str, Any]) -> tuple[int, str] | None:
        if self.drops and prompt_token_count(body.get("prompt", "")) == DROPPED_LEN:
            self.failed += 1
            return 500, "dropped under load"
        return None


def trace_config(run_id: str, engines: dict[str, str], trace: Path, rounds: int, bucket: str = "unused",
                 **extra: Any) -> RunConfig:
    """A run of the trace (and the output_streams check, whose pass lets TTFT be published) on each engine."""
    functional = {"enabled": True, "skip": [c for c in _check_names() if c != "output_streams"]}
    return parse_run_config({
        "run_id": run_id, "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [external(name, url, "vllm") for name, url in engines.items()],
        "scenarios": {**scenarios(trace={"enabled": True, "path": str(trace), "format": "dayone", "rounds": rounds,
                                         "block_tokens": 16, "lateness_p99_max_s": LATENESS_MAX_S}),
                      "functional": functional, "warmup": False, **extra.pop("scenarios", {})},
        "archive": {"bucket": bucket}, "request_timeout_s": 10, "choice": {"purposes": PURPOSES}, **extra})


def _check_names() -> tuple[str, ...]:
    from tasks.core.names import CHECK_NAMES

    return CHECK_NAMES


def engine_context(cfg: RunConfig, run_dir: RunDir, engine: str, server: PlainServer) -> EngineContext:
    """The context a step measures one engine in; the engine recorded deployed and ready, as the deploy and
    readiness steps leave it (a plain server serves from the start)."""
    from tasks.state.documents import readiness_doc
    from tasks.targets.base import Deployment

    Deployment(engine, server.url, DIGEST).save(run_dir)
    run_dir.write_json(readiness_doc(engine), {"ready": True, "detail": "a plain server of the test"})
    return EngineContext(cfg, endpoint_for(cfg, engine, server.url, DIGEST), run_dir)


def measure_trace(cfg: RunConfig, run_dir: RunDir, engine: str, server: PlainServer) -> dict[str, Any]:
    """The output_streams check, then the trace replayed, against one engine's server; the trace's result, kept
    for the report as the trace step keeps it."""
    from tasks.checks import run_functional
    from tasks.scenarios.trace import run_trace
    from tasks.state.documents import perf_summary_doc

    ctx = engine_context(cfg, run_dir, engine, server)
    run_functional(ctx)
    result = run_trace(ctx, None)
    run_dir.write_json(perf_summary_doc(engine, "trace"), result)
    return result


def night_dir(root: Path, run_id: str, created: float, cfg: RunConfig, engines: list[str]) -> RunDir:
    """A night's run directory as the pipeline leaves it before compare: manifest, pins, validation passed."""
    run_dir = RunDir(run_id, root)
    run_dir.write_json("manifest.json", {"run_id": run_id, "created_ts": created, "config": cfg.model_dump(mode="json")})
    run_dir.write_json("pinned.json", {e: {"image_digest": DIGEST} for e in engines})
    run_dir.write_json("validation.json", {"success": True})
    return run_dir


def archive(run_dir: RunDir, cfg: RunConfig, s3: Any) -> None:
    """Archive a night with its summary.json, as the pipeline's report and archive steps leave it."""
    from tasks.publish.archive import archive_run, json_bytes, put_once
    from tasks.report import build_summary

    archive_run(run_dir, cfg, s3)
    for prefix in run_dir.read_json("archive.json")["prefixes"].values():
        put_once(s3, cfg.archive.bucket, prefix + "summary.json",
                 json_bytes(build_summary(run_dir, cfg).model_dump(mode="json")), "application/json")
