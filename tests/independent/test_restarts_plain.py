"""Counter resets and engine restarts against servers written for the test (not DayOne's simulator).

Three behaviours, each held through the CLI (`dayone cache`, `dayone bench`) and the pipeline's
summary.json and report.html:
- a vLLM-named prefix cache that restarts after the second repeat of the trial (counters back to
  zero, a new process_start_time_seconds, cache empty): before, DayOne published 66.67% "effective";
- counters that fall back from a large base with no restart signal: before, DayOne published the
  ratio of two negative deltas (49.9%);
- a server that restarts in the middle of a benchmark: before, nothing noticed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest
from aiohttp import web
from plain_pipeline import external, run_pipeline, scenarios
from plain_server import MODEL, PlainServer, messages_token_count, prompt_token_count

QUERIES, HITS = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"
TRIAL_MIN_WORDS = 100  # the cache trial's prompt; short probes and benchmark prompts stay below
CACHE_PROMPT_TOKENS = 400
REPEATS = 5
BENCH_OUTPUT_TOKENS = 16


class PrefixCacheServer(PlainServer):
    """A prefix cache keyed by the whole prompt, with vLLM's counter names and prometheus_client's
    process_start_time_seconds. `restart_after`: after that many trial-sized requests the server
    restarts (counters zero, new start time, cache empty); `base_drop_after`: counters start at a
    large base that is dropped (no new start time) after that many."""

    def __init__(self, restart_after: int | None = None, base_drop_after: int | None = None,
                 base: tuple[float, float] = (1_000_000.0, 500_000.0)) -> None:
        super().__init__()
        self.restart_after, self.base_drop_after = restart_after, base_drop_after
        self.start_time = 1_700_000_000.0
        self.base = base if base_drop_after else (0.0, 0.0)
        self.queries = self.hits = 0.0
        self.cached: set[str] = set()
        self.trial_requests = 0
        self.lock = threading.Lock()

    def _key(self, body: dict) -> str:
        return json.dumps(body.get("messages") or body.get("prompt"), sort_keys=True)

    async def _generate(self, request: web.Request, kind: str) -> web.StreamResponse:
        body = await request.json()
        words = messages_token_count(body.get("messages") or []) if kind == "chat" else prompt_token_count(
            body.get("prompt", ""))
        key = self._key(body)
        with self.lock:
            hit = key in self.cached
            self.cached.add(key)
            self.queries += words
            self.hits += words if hit else 0
        self._hot = hit
        response = await super()._generate(_Replayed(request, body), kind)
        if words >= TRIAL_MIN_WORDS:
            with self.lock:
                self.trial_requests += 1
                if self.trial_requests == self.restart_after:
                    self.start_time += 60.0
                    self.queries = self.hits = 0.0
                    self.cached.clear()
                if self.trial_requests == self.base_drop_after:
                    self.base = (0.0, 0.0)
        return response

    def first_token_delay_s(self, kind, prompt_tokens, max_tokens):
        return 0.01 if getattr(self, "_hot", False) else 0.15  # a cached prompt skips its prefill

    def metrics_text(self) -> str:
        with self.lock:
            q, h = self.queries + self.base[0], self.hits + self.base[1]
            start = self.start_time
        return (f"# TYPE {QUERIES} counter\n{QUERIES}{{model_name=\"{MODEL}\"}} {q}\n"
                f"# TYPE {HITS} counter\n{HITS}{{model_name=\"{MODEL}\"}} {h}\n"
                f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {start}\n")

    async def _reset(self, request: web.Request) -> web.Response:
        with self.lock:
            self.cached.clear()
        return web.json_response({"success": True})

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.post("/reset_prefix_cache", self._reset)]


class _Replayed:
    """The request with its body already read (aiohttp reads a body once)."""

    def __init__(self, request: web.Request, body: dict) -> None:
        self._request, self._body = request, body

    async def json(self) -> dict:
        return self._body

    def __getattr__(self, name: str):
        return getattr(self._request, name)


class RestartsMidBench(PlainServer):
    """Restarts after `restart_after` benchmark-sized completions (output of BENCH_OUTPUT_TOKENS):
    its request counter falls back to zero and process_start_time_seconds moves on."""

    def __init__(self, restart_after: int) -> None:
        super().__init__()
        self.restart_after = restart_after
        self.served = 100  # it served before the run
        self.start_time = 1_700_000_000.0
        self.bench_requests = 0

    def completion_events(self, kind, prompt_tokens, max_tokens):
        self.served += 1
        if max_tokens == BENCH_OUTPUT_TOKENS and prompt_tokens < TRIAL_MIN_WORDS:
            self.bench_requests += 1
            if self.bench_requests == self.restart_after:
                self.served, self.start_time = 0, self.start_time + 30.0
        return super().completion_events(kind, prompt_tokens, max_tokens)

    def metrics_text(self) -> str:
        return (f"# TYPE vllm:request_success_total counter\nvllm:request_success_total {float(self.served)}\n"
                f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {self.start_time}\n")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tasks.cli", *args], capture_output=True, text=True, timeout=240)


def _cache(url: str, out: Path) -> subprocess.CompletedProcess:
    return _cli("cache", "--endpoint", url, "--dialect", "vllm", "--model", MODEL, "--prompt-tokens",
                str(CACHE_PROMPT_TOKENS), "--repeats", str(REPEATS), "--output-tokens", "4", "--out", str(out))


# ---- the CLI ---------------------------------------------------------------------------------------


def test_cache_cli_effective_on_a_steady_server(tmp_path):
    """The control: the same server without a restart is an effective prefix cache."""
    with PrefixCacheServer() as server:
        proc = _cache(server.url, tmp_path)
    verdict = json.loads((tmp_path / "prefix_cache.json").read_text())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert verdict["verdict"] == "effective" and verdict["hit_rate"] == pytest.approx(5 / 6, abs=0.02), verdict


def test_cache_cli_publishes_no_hit_rate_across_a_restart_after_the_second_repeat(tmp_path):
    with PrefixCacheServer(restart_after=3) as server:  # cold + 2 repeats, then the restart
        proc = _cache(server.url, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdict = json.loads((tmp_path / "prefix_cache.json").read_text())
    assert verdict["hit_rate"] is None and verdict["verdict"] == "unconfirmed", verdict
    assert verdict["server_queries_delta"] is None and verdict["server_hits_delta"] is None
    assert f"{QUERIES} fell from" in verdict["reason"] and "process_start_time_seconds changed" in verdict["reason"]
    trials = pd.read_csv(tmp_path / "cache_trials.csv")
    assert trials["server_queries_delta"].isna().all() and trials["server_hits_delta"].isna().all()
    assert trials["deltas_unpublished"].str.contains("engine restarted").all()
    assert "server deltas not published" in proc.stdout and "unconfirmed" in proc.stdout


def test_cache_cli_publishes_no_ratio_of_negative_deltas_when_counters_fall_from_a_base(tmp_path):
    with PrefixCacheServer(base_drop_after=3) as server:
        proc = _cache(server.url, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdict = json.loads((tmp_path / "prefix_cache.json").read_text())
    assert verdict["hit_rate"] is None and verdict["verdict"] == "unconfirmed", verdict
    assert f"{QUERIES} fell from 100" in verdict["reason"], verdict["reason"]  # from the 1,000,000 base
    assert "process_start_time_seconds" not in verdict["reason"]  # the counters alone told
    trials = pd.read_csv(tmp_path / "cache_trials.csv")
    assert trials["server_hits_delta"].isna().all()


def test_bench_cli_flags_a_restart_in_the_middle_of_the_benchmark(tmp_path):
    with RestartsMidBench(restart_after=5) as server:
        proc = _cli("bench", "--endpoint", server.url, "--dialect", "vllm", "--model", MODEL, "--scenario", "short",
                    "--concurrency", "2", "--rounds", "2", "--requests-per-round", "4", "--input-tokens", "16",
                    "--output-tokens", str(BENCH_OUTPUT_TOKENS), "--no-warmup", "--out", str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    restarts = summary["restarts"]
    assert restarts["restarted_steps"] == ["short"] and restarts["total"] == 1, restarts
    assert "process_start_time_seconds changed" in restarts["steps"]["short"]["reason"]
    assert "vllm:request_success_total fell from" in restarts["steps"]["short"]["reason"]
    assert summary["scenarios"]["short"]["engine_restarted"] is True
    assert "ENGINE RESTARTED in short" in proc.stdout


def test_bench_cli_sees_no_restart_on_a_steady_server(tmp_path):
    with RestartsMidBench(restart_after=10_000) as server:
        proc = _cli("bench", "--endpoint", server.url, "--dialect", "vllm", "--model", MODEL, "--scenario", "short",
                    "--concurrency", "2", "--rounds", "2", "--requests-per-round", "4", "--input-tokens", "16",
                    "--output-tokens", str(BENCH_OUTPUT_TOKENS), "--no-warmup", "--out", str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert summary["restarts"]["total"] == 0 and summary["scenarios"]["short"]["engine_restarted"] is False



# ---- the pipeline --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipeline_run(airflow_db, s3_server, tmp_path_factory):
    with PrefixCacheServer(restart_after=3) as resetcache, RestartsMidBench(restart_after=5) as midbench:
        run_dir = run_pipeline({
            "model": {"name": MODEL, "context_limit_tokens": 4096},
            "engines": [external("resetcache", resetcache.url, "vllm"), external("midbench", midbench.url, "vllm")],
            "scenarios": scenarios(
                warmup=False,
                short={"input_tokens": 16, "output_tokens": BENCH_OUTPUT_TOKENS, "concurrency": [2], "rounds": 2,
                       "requests_per_round": 4},
                prefix_cache={"prompt_tokens": CACHE_PROMPT_TOKENS, "repeats": REPEATS, "output_tokens": 4}),
            "archive": {"bucket": "restarts"},
            "request_timeout_s": 30,
        }, s3_server, tmp_path_factory.mktemp("restart-runs"), datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc))
    summary = run_dir.read_json("summary.json")
    assert summary is not None, f"no summary.json; step outcomes in {run_dir.path / 'state' / 'steps'}"
    assert summary["validation_success"], summary["validation"]  # null deltas are valid rows, never negative ones
    return summary, (run_dir.path / "report.html").read_text(encoding="utf-8"), run_dir


def test_pipeline_publishes_no_hit_rate_across_a_restart_in_the_cache_trial(pipeline_run):
    summary, html, _ = pipeline_run
    engine = summary["engines"]["resetcache"]
    pc = engine["prefix_cache"]
    assert pc["hit_rate"] is None and pc["verdict"] == "unconfirmed", pc
    assert f"{QUERIES} fell from" in pc["reason"] and pc["engine_restarted"] is True
    assert all(t["server_hits_delta"] is None and t["deltas_unpublished"] for t in engine["cache_trials"])
    assert engine["restarts"]["restarted_steps"] == ["prefix_cache"]
    assert f"{QUERIES} fell from" in html


def test_pipeline_flags_a_restart_during_the_benchmark_and_totals_restarts_per_engine(pipeline_run):
    summary, html, run_dir = pipeline_run
    assert summary["restarts"] == {"resetcache": 1, "midbench": 1}
    engine = summary["engines"]["midbench"]
    assert engine["restarts"]["restarted_steps"] == ["short"] and engine["perf"]["short"]["engine_restarted"] is True
    assert summary["engines"]["resetcache"]["perf"]["short"]["engine_restarted"] is False
    check = [r for r in run_dir.read_rows("checks", "midbench") if r["check"] == "engine_restarts"
             and r["scenario"] == "short"]
    assert check and check[0]["outcome"] == "fail" and "during step short" in check[0]["evidence"]["reason"]
    assert "during short" in html
