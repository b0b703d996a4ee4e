"""Measured TTFT, TPOT, ITL and E2E match the simulator's ground truth (PROTOCOL.md section 3)."""

from __future__ import annotations

import time

import pytest

from cpu_wait import ATTEMPTS, LOADED, pressure_share, runqueue_wait_s
from tasks.stats.figures import median
from tasks.scenarios.perf import run_perf
from tasks.scenarios.warmup import reset_shapes
from tasks.sim.process import start_sim
from tasks.state.tables import REQUESTS, ROUNDS, to_frame

# A client timestamp may never precede the server's, and the typical (median) error stays near a
# millisecond. A request may trail by as long as the client was off a core (74 ms once; a loaded CI
# machine deschedules a process for up to a second): a stall only makes a client time later, so the
# lower bound is tight, the per-request upper bound allows the stall, the medians below do not.
STALL_S = 1.0


@pytest.fixture(scope="module")
def sim():
    with start_sim("vllm", {"ttft_base_s": 0.05, "itl_s": 0.01, "itl_jitter_s": 0.004, "slots": 8, "seed": 3}) as s:
        yield s


def test_measured_latencies_match_the_ground_truth(sim, make_ctx, short):
    """A round whose medians missed while the machine was loaded (some task, the simulator's or the
    client's, waited for a core more than LOADED of the time) is run again, up to ATTEMPTS in all, and
    the last is judged; the per-request bounds hold in every one. A stamp taken at the wrong moment
    misses in every round."""
    for attempt in range(ATTEMPTS):
        sim.clear_requests()  # the request ids repeat: the ground truth is this round's
        share = pressure_share()
        ttft_err, itl_err = _one_round(sim, make_ctx, short)
        pressure = share()
        print(f"attempt {attempt + 1}: some task waited for a core {100 * pressure:.0f}% of the time; median "
              f"errors ITL {1e3 * median(itl_err):.2f} ms, TTFT {1e3 * median(ttft_err):.2f} ms")
        if (median(itl_err) < 0.002 and median(ttft_err) < 0.005) or pressure < LOADED:
            break
    assert median(itl_err) < 0.002
    assert median(ttft_err) < 0.005


def _one_round(sim, make_ctx, short) -> tuple[list[float], list[float]]:
    """One round of 6 against the ground truth, each request within its bounds; the TTFT and ITL errors."""
    ctx = make_ctx(sim.url, "vllm", scenarios=short([2], rounds=1, requests=6))
    reset_shapes(ctx.run_dir, "sim")
    run_perf(ctx, "short")
    rows = ctx.run_dir.read_rows("requests", "sim")
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows)
    ttft_err, e2e_err, itl_err = [], [], []
    for row in rows:
        truth = sim.requests(row["request_id"])[0]
        out_ts = [t for t, k in zip(truth["event_ts"], truth["event_kinds"]) if k == "output"]
        sim_ttft = out_ts[0] - truth["arrival_ts"]
        sim_e2e = out_ts[-1] - truth["arrival_ts"]
        sim_gaps = [b - a for a, b in zip(out_ts, out_ts[1:])]
        # The client's send precedes the server's arrival: its TTFT and E2E are never shorter.
        assert sim_ttft - 0.001 <= row["ttft_s"] <= sim_ttft + STALL_S
        assert sim_e2e - 0.001 <= row["e2e_s"] <= sim_e2e + STALL_S
        assert row["first_event_s"] <= row["ttft_s"]
        assert len(row["itl_s"]) == len(sim_gaps) == 15
        itl_err += [abs(a - b) for a, b in zip(row["itl_s"], sim_gaps)]
        ttft_err.append(row["ttft_s"] - sim_ttft)
        e2e_err.append(row["e2e_s"] - sim_e2e)
        assert row["completion_tokens"] == truth["completion_tokens"] == 16
        assert row["tokens_per_event"] == [1] * 16
        sim_tpot = (sim_e2e - sim_ttft) / 15
        # TPOT is off by no more than this row's own TTFT and E2E errors spread over its 15 gaps: a
        # stalled row may be off, a TPOT of another definition (E2E over 16 tokens) is off by milliseconds
        assert abs(row["tpot_s"] - sim_tpot) <= (abs(ttft_err[-1]) + abs(e2e_err[-1])) / 15 + 0.001
        assert row["length_deviation"] is False
    return ttft_err, itl_err


def test_rows_have_exactly_the_schema_columns(sim, make_ctx, short):
    ctx = make_ctx(sim.url, "vllm", scenarios=short([1], rounds=1, requests=2))
    summary = run_perf(ctx, "short")
    requests = ctx.run_dir.read_rows("requests", "sim")
    rounds = ctx.run_dir.read_rows("rounds", "sim")
    assert set(requests[0]) == set(REQUESTS.column_names)
    assert set(rounds[0]) == set(ROUNDS.column_names)
    to_frame("requests", requests)  # types convert
    to_frame("rounds", rounds)
    level = summary["levels"][0]
    assert level["concurrency"] == 1
    assert level["figures"]["output_tps"]["rounds"][0] == pytest.approx(rounds[0]["output_tps"])


def test_closed_loop_keeps_exactly_c_requests_in_flight(sim, make_ctx, short):
    ctx = make_ctx(sim.url, "vllm", scenarios=short([3], rounds=1, requests=9, output=8))
    run_perf(ctx, "short")
    rows = ctx.run_dir.read_rows("requests", "sim")
    spans = [(r["send_ts"], r["send_ts"] + r["e2e_s"]) for r in rows]
    # At each send, count the requests in flight: never more than 3, and 3 once the loop is full.
    in_flight = [sum(1 for s, e in spans if s <= t < e) for t, _ in spans]
    assert max(in_flight) == 3
    truth = [sim.requests(r["request_id"])[0] for r in rows]
    # The simulator has 8 slots: nothing queued. Its wait is its own loop's delay, a few ms at most
    # (12.6 ms once on a busy suite); a request that waited for a slot would wait a whole request, 0.13 s.
    assert max(t["queue_wait_s"] for t in truth) < 0.05


def test_a_ramp_starts_the_streams_apart(sim):
    from tasks.engines import adapter_for
    from tasks.load.client import new_session, run_async, run_closed_loop
    from tasks.load.plan import Shape, plan_requests

    adapter = adapter_for("vllm")
    specs = plan_requests(model="dayone-sim-model", adapter=adapter, shape=Shape(8, 32, 3), count=3,
                          id_prefix="ramp", seed="r")

    async def go():
        async with new_session() as session:
            return await run_closed_loop(session, sim.url, specs, 3, adapter, 30, ramp_s=0.3)

    waited0, t0 = runqueue_wait_s(), time.time()
    sends = sorted(r.send_ts for r in run_async(go()))
    waited = runqueue_wait_s() - waited0
    after = [s - t0 for s in sends]
    # each request takes about 0.36 s, longer than the ramp: every worker sends one, 0.1 s apart. A
    # stall only makes a send later: the k-th is never before k * 0.1 s (without the ramp all leave at
    # once); it is later by at most the time this thread waited for a core, and a little
    assert all(a >= 0.1 * k - 0.005 for k, a in enumerate(after)), after
    assert all(a <= 0.1 * k + 0.1 + waited for k, a in enumerate(after)), (after, waited)


@pytest.mark.parametrize("keep_alive", [True, False])
def test_the_pool_reuses_a_connection_per_stream_or_closes_each(sim, keep_alive):
    """Three requests in turn: one kept-alive connection serves them all; without keep-alive
    each request had its own and none is left open."""
    from tasks.engines import adapter_for
    from tasks.load.client import new_session, run_async, send_request
    from tasks.load.plan import Shape, plan_requests

    adapter = adapter_for("vllm")
    specs = plan_requests(model="dayone-sim-model", adapter=adapter, shape=Shape(8, 4, 1), count=3,
                          id_prefix="pool", seed="s")

    async def go():
        async with new_session(keep_alive) as session:
            results, open_after = [], []
            for spec in specs:
                results.append(await send_request(session, sim.url, spec, adapter, 30))
                open_after.append(len(session.connections()))
            return results, open_after

    results, open_after = run_async(go())
    assert [r.status for r in results] == ["ok"] * 3, [r.error for r in results]
    assert open_after == ([1, 1, 1] if keep_alive else [0, 0, 0])
