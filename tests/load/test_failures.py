"""A request that fails is a row with its error, never a silent drop; a round above the error
rate is failed; usage that differs from the requested lengths is flagged (PROTOCOL.md 3-5)."""

from __future__ import annotations

from tasks.scenarios.perf import run_perf
from tasks.sim.process import start_sim

FAST = {"ttft_base_s": 0.005, "itl_s": 0.001, "slots": 8}


def _rows(ctx):
    return ctx.run_dir.read_rows("requests", "sim"), ctx.run_dir.read_rows("rounds", "sim")


def test_http_errors_are_rows_and_fail_the_round(make_ctx, short):
    profile = {**FAST, "faults": {"error_burst": {"after_requests": 2, "count": 3, "status": 503}}}
    with start_sim("sglang", profile) as sim:
        ctx = make_ctx(sim.url, scenarios=short([2], rounds=2, requests=8, output=4), round_error_rate_max=0.05)
        summary = run_perf(ctx, "short")
    requests, rounds = _rows(ctx)
    assert len(requests) == 16  # every request has its row, failed ones included
    failed = [r for r in requests if r["status"] != "ok"]
    assert len(failed) == 3
    assert all(r["status"] == "error" and r["http_status"] == 503 and "503" in r["error"] for r in failed)
    by_round = {r["round"]: r for r in rounds}
    assert by_round[1]["status"] == "failed" and by_round[1]["requests_failed"] == 3
    assert by_round[1]["error_rate"] == 3 / 8
    assert by_round[2]["status"] == "ok"
    level = summary["levels"][0]
    assert level["failed_rounds"] == 1
    assert level["figures"]["output_tps"]["rounds"][0] is None  # a failed round is not in the median


def test_malformed_and_cut_streams_are_error_rows_and_the_client_goes_on(make_ctx, short):
    profile = {**FAST, "faults": {"malformed_sse_every_nth": 3, "cut_stream_every_nth": 4}}
    with start_sim("vllm", profile) as sim:
        ctx = make_ctx(sim.url, "vllm", scenarios=short([2], rounds=1, requests=12, output=8), round_error_rate_max=1.0)
        run_perf(ctx, "short")
    requests, rounds = _rows(ctx)
    assert len(requests) == 12
    errors = [r["error"] for r in requests if r["status"] == "error"]
    assert any("malformed" in e for e in errors)
    assert any("before [DONE]" in e for e in errors)
    assert sum(r["status"] == "ok" for r in requests) >= 6
    assert rounds[0]["requests_failed"] == len(errors)


def test_a_stall_longer_than_the_request_timeout_is_a_timeout_row(make_ctx, short):
    # A request without the stall takes ~15 ms: a timeout of 2 s leaves room for a loaded machine
    # descheduling the client or the simulator (for up to a second), and the planted stall is longer
    # than the timeout by as much again (the simulator's stop waits for the stalled streams' end)
    profile = {**FAST, "faults": {"stall": {"after_events": 2, "seconds": 4.0, "every_nth": 2}}}
    with start_sim("sglang", profile) as sim:
        ctx = make_ctx(sim.url, scenarios=short([2], rounds=1, requests=4, output=8), request_timeout_s=2.0,
                       round_error_rate_max=1.0)
        run_perf(ctx, "short")
    requests, _ = _rows(ctx)
    timeouts = [r for r in requests if r["status"] == "timeout"]
    assert len(timeouts) == 2
    assert all("2 s" in r["error"] for r in timeouts)
    assert all(r["ttft_s"] is not None for r in timeouts)  # what was timed before the stall is kept


def test_an_unreachable_server_gives_error_rows(make_ctx, short):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = make_ctx(f"http://127.0.0.1:{port}", scenarios=short([1], rounds=1, requests=3))
    run_perf(ctx, "short")
    requests, rounds = _rows(ctx)
    assert [r["status"] for r in requests] == ["error"] * 3
    assert all("Connect" in r["error"] or "connect" in r["error"] for r in requests)
    assert rounds[0]["status"] == "failed" and rounds[0]["duration_s"] is None


def test_usage_lengths_that_differ_from_the_request_are_flagged(make_ctx, short):
    # The generic OpenAI dialect cannot force the length (no ignore_eos/min_tokens): the
    # simulated model stops by itself after 16 tokens although 40 were asked for.
    with start_sim("openai", {**FAST, "natural_output_tokens": 16}) as sim:
        ctx = make_ctx(sim.url, "openai", scenarios=short([2], rounds=1, requests=4, output=40))
        summary = run_perf(ctx, "short")
    requests, rounds = _rows(ctx)
    assert all(r["status"] == "ok" for r in requests)
    assert all(r["completion_tokens"] == 16 and r["expected_completion_tokens"] == 40 for r in requests)
    assert all(r["length_deviation"] is True for r in requests)
    assert rounds[0]["length_deviations"] == 4
    assert summary["levels"][0]["length_deviations"] == 4


def test_missing_usage_is_recorded_as_unknown_and_said(make_ctx, short):
    with start_sim("sglang", {**FAST, "quirks": {"usage_missing": True}}) as sim:
        ctx = make_ctx(sim.url, scenarios=short([1], rounds=1, requests=2, output=8))
        summary = run_perf(ctx, "short")
    requests, _ = _rows(ctx)
    assert all(r["status"] == "ok" and r["completion_tokens"] is None for r in requests)
    assert all(r["tpot_s"] is None and r["length_deviation"] is None for r in requests)
    assert all(r["ttft_s"] is not None and len(r["itl_s"]) == 7 for r in requests)
    assert "no usage" in summary["levels"][0]["usage_note"]
