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
