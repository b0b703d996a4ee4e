"""The simulator's fault plan, as data and without a server: which faults a request meets follows
from the profile and the request's number alone (the streamed effects: test_sim_faults.py)."""

from __future__ import annotations

from tasks.sim.faults import NEVER, StreamPlan, error_burst_status, plan_stream
from tasks.config.sim_profile import validate_profile


def test_every_nth_stream_in_admission_order_meets_its_fault_halfway():
    p = validate_profile({"faults": {"cut_stream_every_nth": 2, "malformed_sse_every_nth": 3},
                          "preemption": {"every_nth": 2, "recompute_s": 0.25}})
    plans = {n: plan_stream(p, n, 10) for n in (1, 2, 3, 6)}
    assert plans[1] == StreamPlan()
    assert (plans[2].cut_at, plans[2].preempt_at, plans[2].recompute_s, plans[2].malformed_at) == (5, 5, 0.25, NEVER)
    assert (plans[3].cut_at, plans[3].malformed_at) == (NEVER, 5)
    assert (plans[6].cut_at, plans[6].malformed_at, plans[6].faults_from_start) == (5, 5, ["malformed_sse"])


def test_a_stream_without_output_events_has_no_malformed_event_and_cuts_or_preempts_at_one():
    p = validate_profile({"faults": {"cut_stream_every_nth": 1, "malformed_sse_every_nth": 1}})
    plan = plan_stream(p, 1, 0)
    assert (plan.malformed_at, plan.cut_at, plan.faults_from_start) == (NEVER, 1, [])


def test_stall_is_planned_for_every_nth_stream_and_counts_only_once_reached():
    p = validate_profile({"faults": {"stall": {"after_events": 3, "seconds": 0.5, "every_nth": 2}}})
    assert not plan_stream(p, 1, 10).stalls
    plan = plan_stream(p, 2, 10)
    assert (plan.stall_at, plan.stall_s, plan.faults_from_start) == (3, 0.5, ["stall"])
    assert [plan.stall_reached(sent) for sent in (0, 3, 4)] == [False, False, True]
    at_start = plan_stream(validate_profile({"faults": {"stall": {"after_events": 0}}}), 1, 10)
    assert at_start.stall_at == 0 and at_start.stall_reached(0)


def test_unstreamed_quirk_every_nth_stream():
    p = validate_profile({"quirks": {"unstreamed_every_nth": 2}})
    assert [plan_stream(p, n, 4).quirks for n in (1, 2)] == [[], ["unstreamed"]]


def test_error_burst_by_arrival_number_and_by_time_since_ready():
    by_count = validate_profile({"faults": {"error_burst": {"after_requests": 2, "count": 3, "status": 503}}})
    assert [error_burst_status(by_count, n, 0.0, None) for n in range(1, 7)] == [None, None, 503, 503, 503, None]
    by_time = validate_profile({"faults": {"error_burst": {"start_s": 1.0, "duration_s": 2.0, "status": 500}}})
    ready = 1000.0
    assert [error_burst_status(by_time, 1, ready + s, ready) for s in (0.5, 1.0, 2.9, 3.0)] == [None, 500, 500, None]
    assert error_burst_status(validate_profile({}), 1, ready, ready) is None
