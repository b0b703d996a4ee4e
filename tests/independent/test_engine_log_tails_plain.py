"""The engine's own log is kept and read (docs/PROTOCOL.md, "The engine's log"): against a server written for the
test that logs as vLLM does (`LEVEL MM-DD HH:MM:SS [file] message`, UTC), the teardown keeps its log scrubbed,
and each slow round is labelled by the lines that coincide with its slowest request: a JIT line in the first
round (compile), a preemption line in an outlier round (scheduler), nothing in another outlier round (unknown).

Before: the log was read once, at startup, and never kept; a first-round tail was told only by shape
bookkeeping, so a compile tail could not be told from a scheduler stall or a slow client."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

from plain_server import MODEL, PlainServer

from tasks.config import parse_run_config
from tasks.core.desensitize import register_secret
from tasks.engines.context import EngineContext, endpoint_for
from tasks.evidence.engine_log import keep_engine_log
from tasks.report.html import render_html
from tasks.report.summary import build_summary
from tasks.scenarios.perf import run_perf
from tasks.scenarios.warmup import reset_shapes
from tasks.state.documents import kept_log_doc, set_readiness
from tasks.state.storage import RunDir

SLOW_S = 1.2  # each slow request; the others take FAST_S, so no two slow spans share a second of the log
FAST_S = 0.3
PLANTED_KEY = "sk-plantedEngineLogKey0123456789"


class LogsLikeVllm(PlainServer):
    """Requests come one at a time, two a round: the first request compiles (a JIT line), round 4's first is
    preempted (a preemption line), round 7's first is slow and logs nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = [f"INFO {self._stamp()} [api_server.py:1] api_key={PLANTED_KEY} starting"]
        self.seen = 0
        self.lock = threading.Lock()

    @staticmethod
    def _stamp() -> str:
        return time.strftime("%m-%d %H:%M:%S", time.gmtime())

    def first_token_delay_s(self, kind: str, prompt_tokens: int, max_tokens: int) -> float:
        with self.lock:
            self.seen += 1
            n = self.seen
        if n == 1:
            self.lines.append(f"INFO {self._stamp()} [backends.py:42] JIT compiling the graph for batch size 1")
        elif n == 7:
            self.lines.append(f"WARNING {self._stamp()} [scheduler.py:1580] Sequence group cmpl-5 is preempted by "
                              "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space")
        return SLOW_S if n in (1, 7, 13) else FAST_S


def test_slow_rounds_are_labelled_by_the_engine_log_kept_for_the_run(tmp_path: Path):
    register_secret(PLANTED_KEY)
    cfg = parse_run_config({"run_id": "tails", "model": {"name": MODEL},
                            "engines": [{"name": "plain", "dialect": "vllm"}],
                            "scenarios": {"warmup": False, "short": {"concurrency": [1], "rounds": 8,
                                                                     "requests_per_round": 2, "input_tokens": 32,
                                                                     "output_tokens": 4}}})
    run_dir = RunDir("tails", root=tmp_path)
    with LogsLikeVllm() as server:
        ectx = EngineContext(cfg, endpoint_for(cfg, "plain", server.url, "sha256:" + "0" * 64), run_dir)
        reset_shapes(run_dir, "plain")
        run_perf(ectx, "short")
        # the teardown step's call, with a target whose engine log is the server's
        ctx = SimpleNamespace(run_dir=run_dir, deployment=lambda e: SimpleNamespace(handle={}),
                              target=SimpleNamespace(startup_log=lambda dep: "\n".join(server.lines)))
        kept = keep_engine_log(ctx, "plain")
    assert kept["kept"] and PLANTED_KEY not in run_dir.read_bytes(kept_log_doc("plain")).decode()
    set_readiness(run_dir, "plain", True, "serving")
    summary = build_summary(run_dir, cfg)
    e = summary.engines["plain"]
    assert e.log_kept
    by_round = {t.round: t for t in e.tail_causes}
    assert sorted(by_round) == [1, 4, 7], [(t.round, t.cause, t.why) for t in e.tail_causes]
    assert by_round[1].first_encounter and by_round[1].cause == "compile", run_dir.read_bytes(kept_log_doc("plain"))
    assert "JIT compiling" in by_round[1].line
    assert by_round[4].cause == "scheduler" and "preempted" in by_round[4].line
    assert by_round[7].cause == "unknown" and by_round[7].line is None
    assert all(t.tail_s >= SLOW_S for t in e.tail_causes)
    page = render_html(summary)
    assert "Slow rounds and the engine's log" in page and "Sequence group cmpl-5 is preempted" in page
