"""The window rule: deltas from /metrics are published only over a window with no counter fall and
no restart; otherwise they are null and the reason names the counter and its fall."""

from __future__ import annotations

import pytest

from tasks.engines import adapter_for
from tasks.evidence.window import START_TIME, Window, breach, hit_rate_over

Q, H = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"


def test_a_steady_window_publishes_its_deltas():
    w = Window(({Q: 100.0, H: 10.0, START_TIME: 5.0}, {Q: 300.0, H: 150.0, START_TIME: 5.0}))
    assert w.breach is None and w.delta(Q) == 200.0
    assert hit_rate_over(adapter_for("vllm"), w).rate == pytest.approx(140 / 200)


def test_a_counter_that_fell_voids_every_delta_and_is_named_with_its_fall():
    w = Window(({Q: 120000.0, H: 60000.0}, {Q: 310.0, H: 200.0}), "during the trial")
    assert w.delta(Q) is None and w.delta(H) is None
    rate = hit_rate_over(adapter_for("vllm"), w)
    assert rate.rate is None and rate.queries_delta is None and rate.hits_delta is None
    assert f"{Q} fell from 120000 to 310 during the trial: engine restarted or counters reset" in rate.unpublished


def test_a_fall_in_the_middle_counts_even_when_the_ends_look_fine():
    # restarted after the second scrape, then climbed past the first value again
    scrapes = ({Q: 1000.0}, {Q: 1500.0}, {Q: 40.0}, {Q: 2000.0})
    assert "fell from 1500 to 40" in breach(scrapes, "during the trial")


def test_a_new_process_start_time_is_a_restart_even_when_counters_rose():
    reason = breach(({Q: 10.0, START_TIME: 1000.0}, {Q: 4000.0, START_TIME: 1060.0}), "during step short")
    assert reason == f"{START_TIME} changed from 1000 to 1060 during step short: the engine restarted"


def test_the_targets_restart_count_breaks_the_window():
    w = Window(({Q: 1.0}, {Q: 2.0}), "during the trial", restarts_before=0, restarts_after=1)
    assert w.breach == "the engine's restart count went from 0 to 1 during the trial" and w.delta(Q) is None


def test_a_gauge_that_falls_is_no_restart():
    assert breach(({"vllm:num_requests_running": 8.0}, {"vllm:num_requests_running": 0.0}), "x") is None


def test_llamacpp_arithmetic_goes_through_the_same_rule():
    adapter = adapter_for("llamacpp")
    processed, cached = adapter.cache_counters.queries, adapter.cache_counters.hits
    fell = hit_rate_over(adapter, Window(({processed: 500.0, cached: 300.0}, {processed: 20.0, cached: 0.0})))
    assert fell.rate is None and f"{processed} fell from 500 to 20" in fell.unpublished
