"""A cold first round is left out of the verdicts (issue 43, items 8 and 12), against plain servers written for
the test that compile each new prompt length on first sight: the trace's round 1 is cold on every night and engine.
The nightly compares the steady rounds, so a real regression under a cold round 1 is red; the choice compares every
pair of engines on their steady rounds, so once the base engine drops on answers the other two are still told
apart."""

from __future__ import annotations

import time

import pytest
from quality_server import CorruptsHalfTheArithmetic, SolvesEverything
from verdict_runs import TailServer, archive, engine_context, measure_trace, night_dir, trace_config, write_trace

from tasks.compare.nightly import RegressionFound, compare_run
from tasks.quality.run import run_quality
from tasks.report import build_summary
from tasks.report.choice import choose
from tasks.state.storage import RunDir

ROUNDS = 6  # round 1 cold, five steady rounds (a loaded machine's P95 TTFT varies by tens of milliseconds)
JIT_S = 3.0  # a new prompt length's first wait: 7 lengths of 50 rows, so round 1's P95 TTFT is cold


def test_a_ttft_regression_under_a_cold_first_round_is_red(s3_server, run_root, tmp_path):
    s3, bucket = s3_server.client(), f"cold-{time.time_ns()}"
    trace = write_trace(tmp_path / "trace.jsonl")
    nights = []
    for n, first_s in ((1, 0.03), (2, 0.18)):  # tonight every first token takes 6 times as long
        with TailServer(slow_tail=False, first_s=first_s, jit_s=JIT_S) as server:
            cfg = trace_config(f"night-{n}", {"eng": server.url}, trace, ROUNDS, bucket)
            run_dir = night_dir(run_root, f"night-{n}", 1000.0 * n, cfg, ["eng"])
            measure_trace(cfg, run_dir, "eng", server)
        nights.append((run_dir, cfg))
    archive(*nights[0], s3)
    night2, cfg2 = nights[1]
    with pytest.raises(RegressionFound) as found:
        compare_run(night2, cfg2, s3)
    ttft = next(r for r in night2.read_rows("regressions", "eng") if r["metric"].startswith("ttft_p95_s"))
    assert ttft["regressed"] and ttft["ci_low"] > 1 + cfg2.thresholds.ttft_p95_rise, ttft
    assert ttft["baseline_value"] < JIT_S / 5 and ttft["value"] < JIT_S / 5, ttft  # steady medians only
    assert "eng/trace ttft_p95_s" in str(found.value)


def test_the_two_engines_left_after_the_base_drops_on_answers_are_compared_on_their_steady_rounds(run_root, tmp_path):
    trace = write_trace(tmp_path / "trace.jsonl")
    answers = {"wrong": CorruptsHalfTheArithmetic, "cold": SolvesEverything, "warm": SolvesEverything}
    tails = {"wrong": {"first_s": 0.02}, "cold": {"first_s": 0.02, "jit_s": JIT_S}, "warm": {"first_s": 0.2}}
    run_dir = RunDir("three-engines", run_root)
    servers = {name: TailServer(slow_tail=False, **tail) for name, tail in tails.items()}
    for server in servers.values():
        server.__enter__()
    try:
        cfg = trace_config("three-engines", {n: s.url for n, s in servers.items()}, trace, ROUNDS,
                           scenarios={"quality": {"enabled": True, "items_per_family": 8, "kv_context_tokens": [64]}})
        for name, server in servers.items():
            measure_trace(cfg, run_dir, name, server)
            with answers[name]() as answering:
                run_quality(engine_context(cfg, run_dir, name, answering))
    finally:
        for server in servers.values():
            server.__exit__(None, None, None)
    summary = build_summary(run_dir, cfg)
    assert {c.base for c in summary.comparisons} == {"wrong"}  # the report compares each with the base engine
    choices = choose(summary, cfg.choice.orders())
    assert [c.picked for c in choices] == [["cold"], ["cold"]], choices
    latency = next(r for r in choices[0].reasons if r.engine == "warm" and r.criterion == "latency")
    assert "warm worse than cold" in latency.text and "trace ttft_p95_s" in latency.text, latency.text
