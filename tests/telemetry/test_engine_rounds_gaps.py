"""The client's timing against the engine's histograms, as arithmetic: when a gap is a finding, and when the
window's histograms hold other requests than the client's (no gap at all)."""

from __future__ import annotations

import pytest

from tasks.engines import adapter_for
from tasks.telemetry.engine_metrics import (GaugeStats, engine_round_row, itl_gap_finding, parse_scrape,
                                            timing_gap_unpublished)

KEYS = {"run_id": "r", "engine": "e", "image_digest": None, "scenario": "short", "round": 1}


def vllm_text(requests: float, ttft_sum: float, itl_gaps: float, itl_sum: float, e2e_sum: float | None = None) -> str:
    """vLLM's timing histograms (one bucket and +Inf each), as its exposition writes them."""
    lines = []
    e2e = [] if e2e_sum is None else [("vllm:e2e_request_latency_seconds", requests, e2e_sum)]
    for name, count, total in (("vllm:time_to_first_token_seconds", requests, ttft_sum),
                               ("vllm:inter_token_latency_seconds", itl_gaps, itl_sum), *e2e):
        lines += [f"# TYPE {name} histogram",
                  f'{name}_bucket{{engine="0",le="0.05",model_name="m"}} {count}',
                  f'{name}_bucket{{engine="0",le="+Inf",model_name="m"}} {count}',
                  f'{name}_sum{{engine="0",model_name="m"}} {total}',
                  f'{name}_count{{engine="0",model_name="m"}} {count}']
    return "\n".join(lines) + "\n"


def row_for(client: dict, requests: float = 8) -> dict:
    before = parse_scrape(vllm_text(0, 0.0, 0, 0.0))
    after = parse_scrape(vllm_text(requests, requests * 0.040, requests * 31, requests * 31 * 0.031))
    return engine_round_row(adapter_for("vllm"), KEYS, before, after, GaugeStats(), client)


def test_an_itl_gap_is_a_finding_only_past_2_ms_and_a_tenth_either_way():
    assert itl_gap_finding(0.03103, 0.03100) is None  # 0.03 ms: what a sound client measures
    assert itl_gap_finding(0.0065, 0.0050) is None  # 30% of a 5 ms step, but 1.5 ms
    assert itl_gap_finding(0.3030, 0.3000) is None  # 3 ms of a 300 ms step: 1%
    late = itl_gap_finding(0.041, 0.031)
    assert late is not None and "41.00 ms" in late and "31.00 ms" in late and "+32%" in late
    assert "not trustworthy" in late and "read the tokens late" in late
    short = itl_gap_finding(0.026, 0.031)
    assert short is not None and "-16%" in short and "shorter than the engine's" in short
    assert itl_gap_finding(None, 0.031) is None and itl_gap_finding(0.031, None) is None


def test_the_gaps_over_a_window_that_holds_the_clients_requests_only():
    client = {"requests_ok": 8, "requests_failed": 0, "ttft_mean_s": 0.0432, "itl_mean_s": 0.03103,
              "tpot_mean_s": 0.03104}
    row = row_for(client)
    assert row["server_ttft_mean_s"] == pytest.approx(0.040) and row["server_itl_mean_s"] == pytest.approx(0.031)
    assert row["ttft_gap_s"] == pytest.approx(0.0032) and row["itl_gap_s"] == pytest.approx(0.00003)
    assert row["tpot_gap_s"] == pytest.approx(0.00004)
    assert row["server_itl_p50_s"] == pytest.approx(0.025)  # half of 248 gaps, interpolated in (0, 0.05]
    assert row["timing_gap_unpublished"] is None
    assert row["ttft_gap_finding"] is None and row["itl_gap_finding"] is None


def test_a_client_gap_shorter_than_vllms_core_stamped_itl_is_no_finding_where_its_streams_match_the_e2e():
    """vLLM stamps ITL in its engine core, TTFT and E2E in its frontend (a CI run on a loaded machine: the
    frontend's spans 133 ms per request shorter than the core's over 15 gaps; here 510 ms, a gap past the
    finding's tenth). The client's streams match the frontend's, so its shorter token gaps are the engine's
    clocks, not the client's timing."""
    before = parse_scrape(vllm_text(0, 0.0, 0, 0.0, 0.0))
    # 8 requests of 16 tokens: TTFT 2.6 s, the core's 15 gaps 258.7 ms, the frontend's span 15 x 224.7 ms.
    after = parse_scrape(vllm_text(8, 8 * 2.603, 8 * 15, 8 * 15 * 0.2587, 8 * (2.603 + 15 * 0.2247)))
    client = {"requests_ok": 8, "requests_failed": 0, "ttft_mean_s": 2.616, "itl_mean_s": 0.2247,
              "tpot_mean_s": 0.2247, "e2e_mean_s": 2.616 + 15 * 0.2247 + 0.004}
    row = engine_round_row(adapter_for("vllm"), KEYS, before, after, GaugeStats(), client)
    assert row["itl_gap_s"] == pytest.approx(-0.034) and row["e2e_gap_s"] == pytest.approx(0.017)
    assert row["client_e2e_mean_s"] == client["e2e_mean_s"]
    assert row["itl_gap_finding"] is None
    # The same short gaps with the client's streams shorter than the engine's: the client's timing is at fault.
    row = engine_round_row(adapter_for("vllm"), KEYS, before, after, GaugeStats(),
                           {**client, "e2e_mean_s": 2.616 + 15 * 0.2247 - 0.120})
    assert row["e2e_gap_s"] == pytest.approx(-0.107)
    assert "shorter than the engine's" in row["itl_gap_finding"]
    assert itl_gap_finding(0.2247, 0.2587) is not None  # no E2E beside it: the gap alone decides


def test_a_client_ttft_below_the_engines_is_a_finding():
    row = row_for({"requests_ok": 8, "requests_failed": 0, "ttft_mean_s": 0.035, "itl_mean_s": 0.031})
    assert row["ttft_gap_s"] == pytest.approx(-0.005)
    assert row["ttft_gap_finding"].startswith("client TTFT mean 35.0 ms below the engine's own 40.0 ms")


def test_the_engines_count_against_the_clients_requests():
    assert timing_gap_unpublished(9, {"requests_ok": 8, "requests_failed": 1}) is None
    assert timing_gap_unpublished(8, {"requests_ok": 8, "requests_failed": 1}) is None  # failed before a token
    assert "other traffic reached the engine" in timing_gap_unpublished(10, {"requests_ok": 8, "requests_failed": 1})
    assert "miss requests the client timed" in timing_gap_unpublished(7, {"requests_ok": 8, "requests_failed": 0})
    row = row_for({"requests_ok": 6, "requests_failed": 0, "ttft_mean_s": 0.09, "itl_mean_s": 0.05})
    assert row["ttft_gap_s"] is None and row["itl_gap_s"] is None and row["ttft_gap_finding"] is None
    assert row["timing_gap_unpublished"].startswith("the engine timed 8 first tokens in the round's window")


def sglang_text(ttft: tuple[float, float], itl: tuple[float, float] | None) -> str:
    """SGLang 0.5.18's labelled timing histograms; `itl` None: no series yet, as on a fresh server whose start-up
    warm-up generated one token (observed on the real engine: tests/realengine/test_sglang_engine.py)."""
    lines = []
    for name, figures in (("sglang:time_to_first_token_seconds", ttft), ("sglang:inter_token_latency_seconds", itl)):
        lines.append(f"# TYPE {name} histogram")
        if figures is not None:
            count, total = figures
            lines += [f'{name}_bucket{{le="0.5",model_name="m"}} {count}', f'{name}_bucket{{le="+Inf",model_name="m"}} '
                      f'{count}', f'{name}_sum{{model_name="m"}} {total}', f'{name}_count{{model_name="m"}} {count}']
    return "\n".join(lines) + "\n"


def test_sglangs_itl_histogram_absent_before_the_first_round_counts_from_zero():
    before = parse_scrape(sglang_text((2, 0.5), None))
    after = parse_scrape(sglang_text((10, 0.5 + 8 * 13.4), (120, 26.4288)))
    client = {"requests_ok": 8, "requests_failed": 0, "ttft_mean_s": 13.415, "itl_mean_s": 0.2209}
    row = engine_round_row(adapter_for("sglang"), KEYS, before, after, GaugeStats(), client)
    assert row["server_itl_mean_s"] == pytest.approx(26.4288 / 120) and "server_itl" not in (row["not_exposed"] or {})
    assert row["itl_gap_s"] == pytest.approx(0.2209 - 26.4288 / 120) and row["timing_gap_unpublished"] is None
    assert row["server_itl_p50_s"] is not None
    # Absent after the round too: the engine exposes no such histogram, said so, no number.
    none = engine_round_row(adapter_for("sglang"), KEYS, before, before, GaugeStats(), client)
    assert none["server_itl_mean_s"] is None and none["itl_gap_s"] is None
    assert "server_itl" in none["not_exposed"]
