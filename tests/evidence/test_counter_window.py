"""The window rule: deltas from /metrics are published only over a window with no counter fall and
no restart; otherwise they are null and the reason names the counter and its fall."""

from __future__ import annotations

import pytest

from tasks.engines import adapter_for
from tasks.telemetry.window import START_TIME, Window, breach, hit_rate_over

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


# ---- each series on its own, and no hole in the window ----------------------------------------

Q0, Q1 = f'{Q}{{engine="0",model_name="m"}}', f'{Q}{{engine="1",model_name="m"}}'
H0, H1 = f'{H}{{engine="0",model_name="m"}}', f'{H}{{engine="1",model_name="m"}}'


def test_one_series_that_fell_voids_the_window_though_the_sum_over_label_sets_rose():
    # vLLM keeps one series per engine core: engine 1 restarted, engine 0 counted on past its loss.
    before = {Q0: 1000.0, Q1: 800.0, H0: 500.0, H1: 400.0}
    after = {Q0: 2500.0, Q1: 50.0, H0: 1400.0, H1: 10.0}
    w = Window((before, after), "during the trial")
    assert w.delta(Q) is None
    reason = hit_rate_over(adapter_for("vllm"), w).unpublished
    assert f'{Q} fell from 800 to 50 during the trial (series {{engine="1",model_name="m"}})' in reason
    assert f'{H} fell from 400 to 10' in reason


def test_deltas_sum_the_series_of_a_whole_window():
    w = Window(({Q0: 100.0, Q1: 100.0, H0: 0.0, H1: 50.0}, {Q0: 300.0, Q1: 200.0, H0: 100.0, H1: 150.0}))
    assert w.breach is None and w.delta(Q) == 300.0
    assert hit_rate_over(adapter_for("vllm"), w).rate == pytest.approx(200 / 300)


def test_a_scrape_that_could_not_be_read_between_two_good_ones_voids_the_window():
    # Restarted while the scrape failed, and counted past its old value before the next one.
    w = Window(({Q: 1000.0, H: 10.0}, None, {Q: 1500.0, H: 900.0}), "during the trial")
    assert w.delta(Q) is None
    assert hit_rate_over(adapter_for("vllm"), w).unpublished == (
        "scrape 2 of 3 during the trial could not be read: a counter reset across it would not show")


def test_an_empty_answer_between_two_good_ones_voids_the_window_even_where_nothing_else_shows():
    w = Window(({Q: 1000.0, H: 10.0}, {}, {Q: 40.0, H: 5.0}), "during the trial")  # a fall hidden by the hole
    reason = hit_rate_over(adapter_for("vllm"), w).unpublished
    assert reason.startswith("scrape 2 of 3 during the trial came back without counters (empty)")


def test_a_scrape_that_lost_a_counter_series_voids_the_window():
    w = Window(({Q0: 10.0, Q1: 10.0}, {Q0: 20.0}, {Q0: 30.0, Q1: 40.0}), "during the trial")
    assert w.breach.startswith(f'scrape 2 of 3 during the trial lacked {Q1} that the scrape before it had')


def test_a_window_unreadable_at_its_ends_has_no_hole_to_report():
    assert Window((None, None, None)).breach is None  # no /metrics at all: the callers say so
    assert Window((None, {Q: 1.0}, {Q: 2.0})).breach is None


def test_restart_evidence_is_not_a_hole():
    # The step watch asks only for restart evidence: an empty answer is no restart.
    assert breach(({Q: 5.0}, {}, {Q: 9.0}), "during the step") is None
