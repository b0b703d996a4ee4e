"""Per-round engine figures against the real llama.cpp server (PyPI xllamacpp, SmolLM2-135M), started
through DayOne's local target: its deferred requests while a round runs, its speculative counters (0
without a draft model: no acceptance figure), and what it does not expose, said in the row."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "realengine"))

from engine_rounds_helpers import engine_row, one_round  # noqa: E402
from llamacpp_helpers import llamacpp_config, running_engine  # noqa: E402
from tasks.load.plan import Shape  # noqa: E402


def test_llamacpp_round_reports_deferred_requests_and_names_what_it_does_not_expose(tmp_path):
    # One slot, two streams at a time: one request is always deferred while the round runs.
    config = llamacpp_config({"model": "smollm2", "ctx_size": 1024, "parallel": 1, "temperature": 0})
    with running_engine(tmp_path, config) as engine:
        ctx = engine.ctx()
        outcome = one_round(ctx, Shape(input_tokens=32, output_tokens=24, concurrency=2), requests=4)
        assert outcome.row["requests_ok"] == 4
        row = engine_row(ctx)
    assert row["deltas_unpublished"] is None
    assert row["gauge_samples"] >= 3
    assert row["waiting_peak"] >= 1 and row["running_peak"] == 1
    assert row["spec_drafts"] == 0 and row["spec_acceptance_rate"] is None  # no draft model
    assert row["preemptions"] is None and row["server_ttft_mean_s"] is None
    assert {"preemptions", "kv_usage_peak", "server_ttft", "queue_time"} <= set(row["not_exposed"])
    assert row["client_ttft_mean_s"] == outcome.row["ttft_mean_s"]
    # No histograms to stand the client's timing against: said, never a number.
    assert row["server_itl_mean_s"] is None and row["client_itl_mean_s"] == outcome.row["itl_mean_s"]
    assert row["ttft_gap_s"] is None and row["itl_gap_s"] is None and row["tpot_gap_s"] is None
    assert row["timing_gap_unpublished"].startswith("not_exposed (server_ttft: llamacpp has no such histogram")
    assert "server_itl" in row["timing_gap_unpublished"]
