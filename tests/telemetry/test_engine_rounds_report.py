"""The report states what each engine spent per round: preempted rounds flagged, the engine's TTFT beside the
client's with the gap finding in words, and what the engine does not expose; the client's TTFT only where
the engine's TTFT is published."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.config import parse_run_config
from tasks.report import summary as summary_module
from tasks.report.html import render_html
from tasks.report.summary import build_summary
from tasks.state.storage import RunDir

FINDING = "client TTFT mean 120.0 ms vs the engine's own 30.0 ms: 90.0 ms (+300%) spent outside the engine's timing"


def _run(root: Path) -> tuple[RunDir, object]:
    cfg = parse_run_config({"run_id": "rep", "engines": [{"name": "eng", "dialect": "sglang"}]})
    run_dir = RunDir("rep", root=root)
    base = {"run_id": "rep", "engine": "eng", "image_digest": None, "scenario": "short", "concurrency": 4,
            "rate_rps": None, "preemption_metric": "sglang:num_retracted_requests_total", "kv_usage_peak": 0.5,
            "server_ttft_mean_s": 0.03, "client_ttft_mean_s": 0.12, "ttft_gap_finding": FINDING,
            "not_exposed": {"spec_drafts": "sglang has no such metric"}}
    with run_dir.rows("engine_rounds", "eng", "short") as out:
        out.write({**base, "round": 1, "warmup": False, "preemptions": 3.0, "preempted": True})
        out.write({**base, "round": 2, "warmup": False, "preemptions": 0.0, "preempted": False})
        out.write({**base, "round": 1, "scenario": "warmup", "warmup": True, "preemptions": 9.0, "preempted": True})
    return run_dir, cfg


def test_preempted_rounds_are_flagged_and_the_ttft_gap_is_stated_with_both_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(summary_module, "engine_ttft_verdict",
                        lambda run_dir, engine: {"reliable": True, "reason": "ok"})
    summary = build_summary(*_run(tmp_path))
    rounds = summary.engines["eng"].engine_rounds
    assert [(r.scenario, r.round, r.preempted) for r in rounds] == [("short", 1, True), ("short", 2, False)]
    assert rounds[0].client_ttft_mean_s == 0.12 and rounds[0].ttft_gap_finding == FINDING
    page = render_html(summary, charts={})
    assert "What the engine spent, per round" in page
    assert "<span class='badge fail'>3 retracted</span>" in page
    assert page.count("<span class='badge fail'>") >= 1 and "9 retracted" not in page  # warmup left out
    assert "120.0 ms vs the engine&#39;s own 30.0 ms" in page
    assert "eng (sglang) does not expose: spec_drafts" in page


def test_client_ttft_and_the_gap_are_withheld_where_ttft_is_unreliable(tmp_path):
    summary = build_summary(*_run(tmp_path))
    assert not summary.engines["eng"].ttft.reliable
    r = summary.engines["eng"].engine_rounds[0]
    assert r.client_ttft_mean_s is None and r.ttft_gap_finding is None
    assert r.server_ttft_mean_s == pytest.approx(0.03)
    assert "120.0 ms" not in render_html(summary, charts={})


def _timed_run(root: Path) -> tuple[RunDir, object]:
    """An SGLang round with both means beside the engine's, a sessions round (no engine_rounds row) and an
    engine of the plain OpenAI dialect (no /metrics at all)."""
    cfg = parse_run_config({"run_id": "rep", "engines": [{"name": "eng", "dialect": "sglang"},
                                                         {"name": "api", "dialect": "openai"}]})
    run_dir = RunDir("rep", root=root)
    level = {"run_id": "rep", "image_digest": None, "concurrency": 4, "rate_rps": None, "input_tokens": 128,
             "output_tokens": 64, "warmup": False}
    with run_dir.rows("engine_rounds", "eng", "short") as out:
        out.write({**level, "engine": "eng", "scenario": "short", "round": 1, "server_ttft_mean_s": 0.0412,
                   "client_ttft_mean_s": 0.0444, "ttft_gap_s": 0.0032, "server_itl_mean_s": 0.03105,
                   "client_itl_mean_s": 0.03108, "itl_gap_s": 0.00003, "client_tpot_mean_s": 0.03107,
                   "client_e2e_mean_s": 2.0030, "server_e2e_mean_s": 2.0004, "e2e_gap_s": 0.0026,
                   "not_exposed": None})
        out.write({**level, "engine": "eng", "scenario": "short", "round": 2, "server_ttft_mean_s": 0.0412,
                   "client_ttft_mean_s": 0.0444, "ttft_gap_s": 0.0032, "server_itl_mean_s": 0.0310,
                   "client_itl_mean_s": 0.0410, "itl_gap_s": 0.0100, "itl_gap_finding": "client ITL mean 41.00 ms vs "
                   "the engine's own 31.00 ms (+32%): the client read the tokens late", "not_exposed": None})
    for engine, scenario in (("eng", "short"), ("eng", "sessions"), ("api", "short")):
        with run_dir.rows("rounds", engine, scenario) as out:
            for n in (1, 2) if (engine, scenario) == ("eng", "short") else (1,):
                out.write({**level, "engine": engine, "scenario": scenario, "round": n, "status": "ok",
                           **({"input_tokens": None, "output_tokens": None, "concurrency": None, "rate_rps": 2.0}
                              if scenario == "sessions" else {})})
    return run_dir, cfg


def test_the_client_against_the_server_per_round_with_the_gaps_in_ms(tmp_path, monkeypatch):
    monkeypatch.setattr(summary_module, "engine_ttft_verdict",
                        lambda run_dir, engine: {"reliable": True, "reason": "ok"})
    summary = build_summary(*_timed_run(tmp_path))
    rounds = summary.engines["eng"].engine_rounds
    assert [(r.scenario, r.round) for r in rounds] == [("sessions", 1), ("short", 1), ("short", 2)]
    assert rounds[1].itl_gap_s == pytest.approx(0.00003) and rounds[1].client_itl_mean_s == pytest.approx(0.03108)
    assert "turn by turn, with no /metrics scrape" in rounds[0].no_engine_figures
    api = summary.engines["api"].engine_rounds
    assert len(api) == 1 and api[0].no_engine_figures.startswith("not_exposed: openai serves no /metrics")
    page = render_html(summary, charts={})
    assert "The client against the server, per round" in page
    assert "over the same window: the /metrics scrape just before the round's first request" in page
    cells = "<td class='num'>44.40 ms</td><td class='num'>41.20 ms</td><td class='num'>+3.20 ms</td>"
    assert cells in page
    assert "<td class='num'>31.08 ms</td><td class='num'>31.05 ms</td><td class='num'>+0.03 ms</td>" in page
    # the client's whole stream beside the engine's E2E, on the clock of the TTFT gap
    assert rounds[1].e2e_gap_s == pytest.approx(0.0026)
    assert "<td class='num'>2003.00 ms</td><td class='num'>2000.40 ms</td><td class='num'>+2.60 ms</td>" in page
    assert "vLLM stamps its ITL in its engine core but its TTFT and E2E in its frontend" in page
    assert "client ITL mean 41.00 ms vs the engine&#39;s own 31.00 ms" in page
    assert "turn by turn, with no /metrics scrape" in page and "openai serves no /metrics" in page


def test_the_clients_itl_is_withheld_with_its_ttft_where_stream_timing_is_unreliable(tmp_path):
    summary = build_summary(*_timed_run(tmp_path))
    r = summary.engines["eng"].engine_rounds[1]
    assert (r.client_itl_mean_s, r.itl_gap_s, r.client_ttft_mean_s, r.ttft_gap_s) == (None, None, None, None)
    assert r.server_itl_mean_s == pytest.approx(0.03105)
    assert "31.08 ms" not in render_html(summary, charts={})
