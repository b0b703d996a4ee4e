"""A sharded round (one client process per shard, tasks/load/shards.py) against one process, at
low load on the independent reference server: the merged tables are the same."""

from __future__ import annotations

import json

import pytest

from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.rounds import RoundPlan, run_round
from tasks.load.shards import split
from tasks.stats.figures import percentile

SAME = ("request_id", "status", "http_status", "output_events", "completion_tokens", "prompt_tokens",
        "tokens_per_event", "length_deviation", "concurrency", "rate_rps", "scenario", "round")
TIMED = ("ttft_s", "first_event_s", "e2e_s", "tpot_s")


def _round(ctx, shards: int, partition: str, rate_rps: float | None = None):
    shape = Shape(32, 16, 6) if rate_rps is None else Shape(32, 16, rate_rps=rate_rps)
    plan = RoundPlan(scenario="short", shape=shape, round=1, requests=24, first_encounter=False, shards=shards,
                     arrival_seed=7)

    async def go():
        async with new_session() as session:
            with ctx.run_dir.rows("requests", "sim", partition) as out:
                return await run_round(ctx, session, plan, out)

    outcome = run_async(go())
    path = ctx.run_dir.path / "tables" / "requests" / "sim" / f"{partition}.jsonl"
    return outcome, sorted((json.loads(line) for line in path.read_text().splitlines()), key=lambda r: r["request_id"])


@pytest.mark.parametrize("rate_rps", [None, 40.0], ids=["closed", "open"])
def test_a_sharded_round_has_the_tables_of_one_process(ref_server, make_ctx, short, rate_rps):
    ctx = make_ctx(ref_server.url, "vllm", scenarios=short([6], rounds=1, requests=24, output=16))
    one, one_rows = _round(ctx, 1, "one", rate_rps)
    two, two_rows = _round(ctx, 2, "two", rate_rps)
    assert len(one_rows) == len(two_rows) == 24
    for a, b in zip(one_rows, two_rows):
        assert {k: a[k] for k in SAME} == {k: b[k] for k in SAME}
        for k in TIMED:  # the server's timing is fixed: 20 ms to the first token, then 10 ms each
            # a row apart by a core taken for a moment (19 ms seen on a loaded machine); the rows as a whole agree
            assert b[k] == pytest.approx(a[k], abs=0.03), (k, a[k], b[k])
        assert len(a["itl_s"]) == len(b["itl_s"]) == 15
    for k in TIMED:
        assert percentile([abs(a[k] - b[k]) for a, b in zip(one_rows, two_rows)], 50) < 0.005, k
    for k in ("requests_ok", "requests_failed", "status", "length_deviations"):
        assert one.row[k] == two.row[k], k
    assert two.row["ttft_p50_s"] == pytest.approx(one.row["ttft_p50_s"], abs=0.01)
    assert [c.shard for c in two.shards] == [0, 1] and [(c.shard, c.offset_s) for c in one.shards] == [(0, 0.0)]
    # one host, one clock: an offset is within the ping's own uncertainty
    assert all(abs(c.offset_s) <= c.uncertainty_s + 0.002 for c in two.shards), two.shards
    assert all(c.wall_s > 0.1 and c.cpu_s > 0 for c in two.shards), two.shards
    # each send stamp against the server's kernel arrival: a shard stamps like one process
    log = ref_server.log()
    err = [abs(r["send_ts"] - log[r["request_id"]]["arrival_ts"]) for r in two_rows]
    assert percentile(err, 50) < 0.0005


def test_sharded_closed_loop_keeps_the_concurrency_and_starts_together(ref_server, make_ctx, short):
    ctx = make_ctx(ref_server.url, "vllm", scenarios=short([6], rounds=1, requests=24, output=16))
    outcome, rows = _round(ctx, 3, "three")
    spans = sorted((r["send_ts"], r["send_ts"] + r["e2e_s"]) for r in rows)
    first_wave = [s for s, _ in spans[:6]]
    assert max(first_wave) - min(first_wave) < 0.05  # the shards' common start
    in_flight = [sum(1 for s, e in spans if s <= t < e) for t, _ in spans]
    assert max(in_flight) <= 6


def test_requests_are_dealt_round_robin():
    assert split(7, 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert split(2, 4) == [[0], [1]]
