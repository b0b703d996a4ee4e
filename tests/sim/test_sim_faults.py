"""Every fault, switched on in the profile and shown against the ground truth."""

from __future__ import annotations

import time

import httpx
import pytest
from sim_helpers import chat, stream

FAST = {"itl_s": 0.002, "ttft_base_s": 0.002}
BODY = {"prompt": "fault please", "max_tokens": 10, "ignore_eos": True}


def complete(sim, request_id: str) -> int:
    return httpx.post(sim.url + "/v1/completions", json=BODY, headers={"X-Request-Id": request_id}, timeout=10).status_code


def test_crash_after_n_requests_exits_the_process(sims):
    sim = sims("vllm", {**FAST, "faults": {"crash_after_requests": 2}})
    assert complete(sim, "one") == 200
    assert complete(sim, "two") == 200
    assert sim.proc.wait(timeout=10) == 70
    with pytest.raises(httpx.TransportError):
        complete(sim, "three")
    assert "simulated engine crash after 2 requests" in sim.log()


def test_restart_on_crash_comes_back_with_a_visible_restart_count(sims):
    sim = sims("sglang", {**FAST, "faults": {"crash_after_requests": 1, "restart_on_crash": True}})
    assert sim.restart_count() == 0
    assert complete(sim, "before") == 200
    deadline = time.monotonic() + 30
    state = {}
    while time.monotonic() < deadline:
        try:
            state = sim.state(timeout_s=1)
            if state["restarts"] == 1 and state["ready"]:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    assert state.get("restarts") == 1 and state.get("ready"), state
    assert sim.alive()  # the supervisor kept running
    assert complete(sim, "after") == 200
    assert "restarting it (restart 1)" in sim.log()


@pytest.mark.parametrize("dialect", ["sglang", "vllm"])
def test_never_ready(sims, dialect):
    sim = sims(dialect, {**FAST, "faults": {"never_ready": True}}, wait_ready=False)
    sim.wait_listening()
    time.sleep(0.3)
    assert sim.state()["ready"] is False
    r = httpx.post(sim.url + "/v1/completions", json=BODY)
    assert r.status_code == 503
    health = httpx.get(sim.url + "/health").status_code
    # SGLang says 503 while starting; vLLM's /health passes although the model never serves
    assert health == (503 if dialect == "sglang" else 200)


def test_error_burst_by_request_count(sims):
    sim = sims("vllm", {**FAST, "faults": {"error_burst": {"after_requests": 2, "count": 3, "status": 503}}})
    codes = [complete(sim, f"r{i}") for i in range(1, 7)]
    assert codes == [200, 200, 503, 503, 503, 200]
    assert [r["status"] for r in sim.requests()] == codes
    assert all("error_burst" in r["faults"] for r in sim.requests()[2:5])


def test_error_burst_in_a_time_window(sims):
    # 5 s from ready: the start's ready poll, the state() call and the early request all land inside it even
    # after a stall of a second or two on a loaded machine
    window_s = 5.0
    sim = sims("sglang", {**FAST, "faults": {"error_burst": {"start_s": 0, "duration_s": window_s, "status": 500}}})
    ready_ts = sim.state()["ready_ts"]
    first = complete(sim, "early")
    time.sleep(max(0.0, ready_ts + window_s + 0.1 - time.time()))
    assert (first, complete(sim, "late")) == (500, 200)


def test_stall_sends_nothing_for_s_seconds_in_every_nth_stream(sims):
    sim = sims("sglang", {**FAST, "faults": {"stall": {"after_events": 3, "seconds": 1.0, "every_nth": 2}}})
    plain = stream(sim.url, "/v1/completions", BODY, "s1")
    stalled = stream(sim.url, "/v1/completions", BODY, "s2")
    assert plain.done and stalled.done
    [row] = sim.requests("s2")
    assert row["faults"] == ["stall"] and sim.requests("s1")[0]["faults"] == []
    planned = [t for t, k in zip(row["event_scheduled_ts"], row["event_kinds"]) if k == "output"]
    assert planned[3] - planned[2] == pytest.approx(1.0 + 0.002, abs=1e-6)
    # on the wire: the 4th output event reached the client no earlier than the stall allowed, and the
    # simulator's own send stamps show the gap (the client's receive times shrink it when the client stalls
    # reading the 3rd; the simulator's shrink only if it is itself late with the 3rd by over half a second)
    sent = [t for t, k in zip(row["event_ts"], row["event_kinds"]) if k == "output"]
    assert stalled.times[3] >= planned[3] - 0.001 and sent[3] >= planned[3] - 0.001 and sent[3] - sent[2] > 0.5
    plain_planned = [t for t, k in zip(sim.requests("s1")[0]["event_scheduled_ts"], sim.requests("s1")[0]["event_kinds"])
                     if k == "output"]
    assert max(b - a for a, b in zip(plain_planned, plain_planned[1:])) == pytest.approx(0.002, abs=1e-6)


def test_malformed_sse_line(sims):
    sim = sims("vllm", {**FAST, "faults": {"malformed_sse_every_nth": 1}})
    s = stream(sim.url, "/v1/chat/completions", chat("malformed", max_tokens=6, ignore_eos=True), "m1")
    bad = [e for e in s.events if isinstance(e, tuple)]
    assert len(bad) == 1 and s.done
    assert sim.requests("m1")[0]["faults"] == ["malformed_sse"]


def test_stream_cut_before_done_in_every_nth_stream(sims):
    sim = sims("sglang", {**FAST, "faults": {"cut_stream_every_nth": 2}})
    whole = stream(sim.url, "/v1/completions", BODY, "c1")
    cut = stream(sim.url, "/v1/completions", BODY, "c2")
    assert whole.done and not cut.done
    assert 0 < len(cut.events) < len(whole.events)
    assert sim.requests("c2")[0]["faults"] == ["cut_stream"]
    assert complete(sim, "still-serving") == 200


def test_client_going_away_mid_stream_is_recorded_and_frees_the_slot(sims):
    sim = sims("sglang", {"itl_s": 0.01, "slots": 1})
    body = {"prompt": "leave early", "max_tokens": 200, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", sim.url + "/v1/completions", json=body, headers={"X-Request-Id": "gone"}) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i >= 6:
                break
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and sim.requests("gone")[0]["status"] == 200:
        time.sleep(0.05)
    row = sim.requests("gone")[0]
    assert row["status"] == 499 and 0 < row["event_kinds"].count("output") < 200
    assert complete(sim, "next") == 200  # the only slot was released
