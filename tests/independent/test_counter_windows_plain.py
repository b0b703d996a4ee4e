"""Counter windows with a hole or a reset hidden in a sum, against servers written for the test.

- A vLLM-named prefix cache whose /metrics answers once with an empty body, or fails once, between
  two good scrapes of the cache trial, and restarts at that moment (counters and cache gone; no
  process_start_time_seconds, as SGLang's multiprocess registry exposes none). Before, `dayone cache`
  published a hit rate over the whole trial: the empty answer hid even the plain fall of the
  counters, and across the failed one other clients' traffic had carried them past their old value.
- An engine with one series per engine core (vLLM's engine label) whose engine 1 restarted during a
  round while engine 0 counted on: the sum over label sets rose, and the round's preemption delta
  was published in engine_rounds and summary.json.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from aiohttp import web
from plain_server import MODEL, PlainServer
from test_restarts_plain import CACHE_PROMPT_TOKENS, REPEATS, PrefixCacheServer

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.rounds import RoundPlan, run_round
from tasks.report.summary import build_summary
from tasks.state.storage import RunDir

OTHER_CLIENTS_TOKENS = 50_000  # counted by the shared engine while the failed scrape hid its restart


class HoleInTheScrapes(PrefixCacheServer):
    """Answers the second scrape after the cold request (the one before the first repeat) with
    `hole` ("empty": 200 and no samples; "fail": 500) and restarts right then."""

    def __init__(self, hole: str) -> None:
        super().__init__()
        self.hole = hole
        self.scrapes_after_cold = 0

    def _restart(self) -> None:
        with self.lock:
            self.queries, self.hits = (OTHER_CLIENTS_TOKENS if self.hole == "fail" else 0.0), 0.0
            self.cached.clear()

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.trial_requests >= 1:
            self.scrapes_after_cold += 1
            if self.scrapes_after_cold == 2:
                self._restart()
                if self.hole == "fail":
                    raise web.HTTPInternalServerError()
                return web.Response(text="", content_type="text/plain")
        text = "".join(line + "\n" for line in self.metrics_text().splitlines()
                       if "process_start_time_seconds" not in line)
        return web.Response(text=text, content_type="text/plain")


def _cache(url: str, out) -> dict:
    proc = subprocess.run([sys.executable, "-m", "tasks.cli", "cache", "--endpoint", url, "--dialect", "vllm",
                           "--model", MODEL, "--prompt-tokens", str(CACHE_PROMPT_TOKENS), "--repeats", str(REPEATS),
                           "--output-tokens", "4", "--out", str(out)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "prefix_cache.json").read_text())


@pytest.mark.parametrize("hole,words", [("empty", "came back without counters (empty)"),
                                        ("fail", "could not be read")])
def test_the_cache_cli_publishes_no_hit_rate_over_a_trial_with_a_hole_in_its_scrapes(hole, words, tmp_path):
    with HoleInTheScrapes(hole) as server:
        verdict = _cache(server.url, tmp_path)
        assert server.scrapes_after_cold > 2  # the hole sat between good scrapes
    assert verdict["hit_rate"] is None and verdict["server_queries_delta"] is None, verdict
    assert verdict["verdict"] == "unconfirmed"
    reason = verdict["hit_rate_unpublished"]
    assert f"during the trial {words}: a counter reset across it would not show" in reason, reason


def test_the_cache_cli_still_publishes_over_a_whole_window(tmp_path):
    """The control: the same server without the hole or the restart."""
    with PrefixCacheServer() as server:
        verdict = _cache(server.url, tmp_path)
    assert verdict["hit_rate"] == pytest.approx(REPEATS / (REPEATS + 1), abs=0.02), verdict


PREEMPTIONS = "vllm:num_preemptions_total"


class TwoEngineCores(PlainServer):
    """vLLM's per-engine series: before the round engine 0 had 50 preemptions and engine 1 10; during
    it engine 0 restarted (2 since) and engine 1 reached 70. The sum went from 60 to 72."""

    def metrics_text(self) -> str:
        served = len(self.requests)
        e0, e1 = (50.0, 10.0) if served == 0 else (2.0, 70.0)
        return (f"# TYPE {PREEMPTIONS} counter\n"
                f'{PREEMPTIONS}{{engine="0",model_name="{MODEL}"}} {e0}\n'
                f'{PREEMPTIONS}{{engine="1",model_name="{MODEL}"}} {e1}\n')


def test_a_round_where_one_engine_core_restarted_publishes_no_delta_in_the_summary(tmp_path):
    cfg = parse_run_config({"run_id": "cores", "model": {"name": MODEL},
                            "engines": [{"name": "eng", "dialect": "vllm", "launcher": "external",
                                         "endpoint": "http://127.0.0.1:1"}]})
    with TwoEngineCores() as server:
        ctx = EngineContext(cfg, endpoint_for(cfg, "eng", server.url, None), RunDir("cores", root=tmp_path))
        plan = RoundPlan(scenario="short", shape=Shape(input_tokens=8, output_tokens=4, concurrency=2), round=1,
                         requests=4, first_encounter=False)

        async def go() -> None:
            async with new_session(ctx.endpoint.adapter.keeps_alive_after_stream) as session:
                with ctx.run_dir.rows("requests", "eng", "short") as out:
                    await run_round(ctx, session, plan, out)

        run_async(go())
    row = build_summary(ctx.run_dir, cfg).engines["eng"].engine_rounds[0]
    assert row.preemptions is None and row.preempted is None, row
    assert (f'{PREEMPTIONS} fell from 50 to 2 during the round (series {{engine="0",model_name="{MODEL}"}}): '
            "engine restarted or counters reset") in row.deltas_unpublished
