"""Published figures against servers written for the test (not DayOne's simulator).

The behaviours, each held on every path that publishes the figure (`dayone bench`, `dayone check`,
the pipeline's summary.json and report.html):
- a server whose completions stream opens with an empty event and then sends all of its output in
  one final event (chat streams normally): TTFT, TPOT and ITL are withheld, E2E stands;
- a server with a first-encounter (JIT) tail on each new request shape, with warmup on: the
  warmup round's tail is shown beside the steady median and the decision names it;
- a server whose second round is three times slower: the throughput's round spread is flagged
  (`dayone bench`), and a steady server's is not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest
from cpu_wait import ATTEMPTS, LOADED, pressure_share
from plain_pipeline import external, run_pipeline, scenarios
from plain_server import MODEL, PlainServer

OUTPUT_TOKENS = 16
# Far above what a loaded machine adds to a request: a CI run measured the steady rounds' TTFT p99 at 0.19 s
# (its median), which 0.3 s did not keep a third of.
JIT_DELAY_S = 1.0


class UnstreamedCompletions(PlainServer):
    """Chat streams token by token; a completions stream sends an empty event, then everything at once."""

    def completion_events(self, kind, prompt_tokens, max_tokens):
        if kind == "chat":
            return super().completion_events(kind, prompt_tokens, max_tokens)
        text = "".join(f"w{i} " for i in range(max_tokens))
        return [(0.005, self.text_chunk(kind, "")), (0.002 * max_tokens, self.text_chunk(kind, text, "length"))]


class FirstEncounterTail(PlainServer):
    """The first two requests of every new (prompt length, output length) wait JIT_DELAY_S longer."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[tuple[int, int], int] = {}

    def first_token_delay_s(self, kind, prompt_tokens, max_tokens):
        key = (prompt_tokens, max_tokens)
        self.seen[key] = self.seen.get(key, 0) + 1
        return 0.01 + (JIT_DELAY_S if self.seen[key] <= 2 else 0.0)


class SteadyServer(PlainServer):
    """Token gaps long enough (a round of ~0.7 s) that a loaded machine's stall of tens of ms stays far
    below the 25% spread rule."""

    token_delay_s = 0.02


class SlowSecondRound(SteadyServer):
    """Requests 5-8 (the second round of 4 when nothing warms up) get a token gap 3x as long."""

    def completion_events(self, kind, prompt_tokens, max_tokens):
        slow = 4 < len(self.requests) <= 8  # this request is already recorded
        events = super().completion_events(kind, prompt_tokens, max_tokens)
        return [(d * 3 if slow and i else d, c) for i, (d, c) in enumerate(events)]


def _bench(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tasks.cli", "bench", "--endpoint", url, "--dialect", "openai", "--model", MODEL,
         "--scenario", "short", "--concurrency", "2", "--rounds", "2", "--requests-per-round", "4",
         "--input-tokens", "16", "--output-tokens", str(OUTPUT_TOKENS), "--out", str(out), *extra],
        capture_output=True, text=True, timeout=180,
    )


# ---- the CLI ---------------------------------------------------------------------------------------


def test_bench_withholds_stream_timing_when_completions_arrive_in_one_event(tmp_path):
    with UnstreamedCompletions() as server:
        proc = _bench(server.url, tmp_path, "--no-warmup")
    assert proc.returncode == 0, proc.stderr[-2000:]
    requests = pd.read_csv(tmp_path / "requests.csv")
    measured = requests[requests["scenario"] == "short"]
    # one event is a fact: the whole output in it
    assert set(measured["output_events"]) == {1}
    assert {json.loads(v) == [OUTPUT_TOKENS] for v in measured["tokens_per_event"]} == {True}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ttft"]["reliable"] is False and "one event" in summary["ttft"]["reason"]
    figures = summary["scenarios"]["short"]["levels"][0]["figures"]
    assert not [k for k in figures if k.startswith(("ttft_", "tpot_", "itl_"))]
    assert figures["e2e_p50_s"]["median"] > 0 and figures["output_tps"]["median"] > 0
    assert "not published" in proc.stdout and "E2E p50/p99" in proc.stdout and "TTFT p50" not in proc.stdout


def test_bench_publishes_stream_timing_for_a_plain_streaming_server(tmp_path):
    with PlainServer() as server:
        proc = _bench(server.url, tmp_path, "--no-warmup")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ttft"]["reliable"] is True, summary["ttft"]
    assert summary["scenarios"]["short"]["levels"][0]["figures"]["ttft_p50_s"]["median"] > 0
    requests = pd.read_csv(tmp_path / "requests.csv")
    assert set(requests[requests["scenario"] == "short"]["output_events"]) == {OUTPUT_TOKENS}


@pytest.mark.parametrize("server_class", [SteadyServer, SlowSecondRound])
def test_bench_flags_a_figure_whose_rounds_spread_over_a_quarter_of_their_median(server_class, tmp_path):
    """A steady server's round slowed by a quarter is a stall of 0.2 s in its 0.7 s (a CI run: 96, 89 and 72
    tokens/s): a try that missed while the machine was loaded (cpu_wait.LOADED) runs again, up to ATTEMPTS in
    all, and the last is judged. A flag on steady rounds, or none on a 3x slower one, misses every try."""
    slow = server_class is SlowSecondRound
    for attempt in range(ATTEMPTS):
        pressure = pressure_share()
        with server_class() as server:
            proc = _bench(server.url, tmp_path / f"try{attempt}", "--no-warmup", "--rounds", "3")
        assert proc.returncode == 0, proc.stderr[-2000:]
        summary = json.loads((tmp_path / f"try{attempt}" / "summary.json").read_text())
        tps = summary["scenarios"]["short"]["levels"][0]["figures"]["output_tps"]
        spread = (max(tps["rounds"]) - min(tps["rounds"])) / tps["median"]
        loaded = pressure()
        print(f"attempt {attempt + 1}: some task waited for a core {100 * loaded:.0f}% of the time; {tps}")
        if (tps["spread"] is slow and (spread > 0.25) is slow) or loaded < LOADED:
            break
    assert tps["spread"] is slow and (spread > 0.25) is slow, tps
    assert ("SPREAD>25%" in proc.stdout) is slow, proc.stdout[-2000:]


def test_check_cli_fails_output_streams_on_the_completions_api(tmp_path):
    with UnstreamedCompletions() as server:
        proc = subprocess.run(
            [sys.executable, "-m", "tasks.cli", "check", "--endpoint", server.url, "--dialect", "openai",
             "--model", MODEL, "--out", str(tmp_path)],
            capture_output=True, text=True, timeout=180,
        )
    checks = pd.read_csv(tmp_path / "checks.csv")
    row = checks[checks["check"] == "output_streams"].iloc[0]
    assert row["outcome"] == "fail" and "completions API" in json.loads(row["evidence"])["reason"]
    assert "TTFT UNRELIABLE" in proc.stdout, proc.stdout[-2000:]


def test_bench_shows_the_first_encounter_the_warmup_took(tmp_path):
    with FirstEncounterTail() as server:
        proc = _bench(server.url, tmp_path)  # warmup on, the default
    assert proc.returncode == 0, proc.stderr[-2000:]
    level = json.loads((tmp_path / "summary.json").read_text())["scenarios"]["short"]["levels"][0]
    first = level["first_encounter"]
    assert first is not None and first["source"].startswith("warmup round"), level
    assert first["ttft_p99_s"] >= JIT_DELAY_S > 3 * level["figures"]["ttft_p99_s"]["median"]
    assert "warmup round" in proc.stdout


# ---- the pipeline --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipeline_run(airflow_db, s3_server, tmp_path_factory):
    with UnstreamedCompletions() as unstreamed, FirstEncounterTail() as jit:
        run_dir = run_pipeline({
            "model": {"name": MODEL, "context_limit_tokens": 4096},
            "engines": [external("unstreamed", unstreamed.url), external("jit", jit.url)],
            "scenarios": scenarios(
                functional={"skip": ["image_input", "tool_call", "tool_call_streaming", "openai_sdk"]},
                short={"input_tokens": 16, "output_tokens": OUTPUT_TOKENS, "concurrency": [2], "rounds": 2,
                       "requests_per_round": 4}),
            "archive": {"bucket": "independent"},
            "request_timeout_s": 30,
        }, s3_server, tmp_path_factory.mktemp("independent-runs"), datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc))
    summary = run_dir.read_json("summary.json")
    assert summary is not None, f"no summary.json; step outcomes in {run_dir.path / 'state' / 'steps'}"
    return summary, (run_dir.path / "report.html").read_text(encoding="utf-8")


def test_pipeline_withholds_stream_timing_for_a_completions_stream_in_one_event(pipeline_run):
    summary, html = pipeline_run
    engine = summary["engines"]["unstreamed"]
    assert engine["ttft"]["reliable"] is False
    assert "completions API" in engine["ttft"]["reason"] and "one event" in engine["ttft"]["reason"]
    level = engine["perf"]["short"]["levels"][0]
    assert not [k for k in level["figures"] if k.startswith(("ttft_", "tpot_", "itl_"))]
    assert level["figures"]["e2e_p50_s"]["median"] > 0
    assert "TTFT not published" in html
    assert summary["engines"]["jit"]["ttft"]["reliable"] is True


def test_pipeline_shows_the_warmup_first_encounter_and_the_decision_names_it(pipeline_run):
    summary, html = pipeline_run
    level = summary["engines"]["jit"]["perf"]["short"]["levels"][0]
    first = level["first_encounter"]
    assert first is not None and first["source"].startswith("warmup round")
    assert first["ttft_p99_s"] >= JIT_DELAY_S and first["e2e_p99_s"] >= JIT_DELAY_S
    worst = [d["text"] for d in summary["decision"] if d["text"].startswith("Worst first encounter")]
    assert worst and "jit short c=2" in worst[0] and "warmup round" in worst[0]
    assert "warmup round" in html
