"""How many client processes a round gets (the run config's `load` section, tasks/load/shards.py), and
what each one got: one client_shards row per client process per round (shard 0 with offset 0 for a round
of one process), its clock offset, wall time, CPU and wait for a core; the table validates against its
suite, and the report names a round whose client waited for a core more than 5% of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.config import ConfigError, parse_run_config
from tasks.config.load import LoadSettings
from tasks.load import shards as shards_module
from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.rounds import RoundPlan, run_round
from tasks.load.shards import cores_available, shards_for

ROOT = Path(__file__).resolve().parents[2]


# ---- the run config ------------------------------------------------------------------------------


def test_the_load_section_defaults_to_auto_at_64_streams_a_process():
    load = parse_run_config({}).load
    assert (load.client_processes, load.streams_per_process) == ("auto", 64)
    load = parse_run_config({"load": {"client_processes": 3, "streams_per_process": 32}}).load
    assert (load.client_processes, load.streams_per_process) == (3, 32)


@pytest.mark.parametrize("section, field", [
    ({"client_processes": "many"}, "load.client_processes"),
    ({"client_processes": 0}, "load.client_processes"),
    ({"client_processes": -2}, "load.client_processes"),
    ({"client_processes": 2.5}, "load.client_processes"),
    ({"client_processes": True}, "load.client_processes"),
    ({"client_processes": None}, "load.client_processes"),
    ({"streams_per_process": 0}, "load.streams_per_process"),
    ({"streams_per_process": "lots"}, "load.streams_per_process"),
    ({"processes": 2}, "load.processes"),
])
def test_a_bad_load_setting_is_refused_naming_the_field_and_the_fix(section, field):
    with pytest.raises(ConfigError) as info:
        parse_run_config({"load": section})
    (path, _, fix), = info.value.problems
    assert path == field and fix
    assert str(info.value).startswith(f"{field}: ") and "Fix: " in str(info.value)
    if field == "load.client_processes":
        assert "auto" in fix


# ---- how many processes --------------------------------------------------------------------------


def _auto(streams_per_process: int = 64) -> LoadSettings:
    return LoadSettings(client_processes="auto", streams_per_process=streams_per_process)


@pytest.fixture
def idle_machine(monkeypatch):
    """No other process keeps a core busy (this test's machine may be shared)."""
    monkeypatch.setattr(shards_module, "busy_cores", lambda cpus, sample_s: 0.0)


@pytest.mark.parametrize("concurrency, cores, expected", [
    (1, 8, 1), (64, 8, 1), (65, 8, 2), (128, 8, 2), (256, 8, 4), (512, 8, 8), (1000, 8, 8),
    (256, 2, 2), (512, 2, 2), (512, 1, 1),
])
def test_auto_gives_one_process_per_64_streams_at_most_one_per_core(monkeypatch, idle_machine, concurrency, cores,
                                                                    expected):
    monkeypatch.setattr(shards_module, "cores_available", lambda: cores)
    assert shards_for(_auto(), Shape(128, 64, concurrency)) == expected


def test_auto_counts_streams_per_process_as_configured(monkeypatch, idle_machine):
    monkeypatch.setattr(shards_module, "cores_available", lambda: 16)
    assert shards_for(_auto(32), Shape(128, 64, 64)) == 2
    assert shards_for(_auto(100), Shape(128, 64, 250)) == 3


def test_auto_bounds_an_open_loop_round_by_its_request_count(monkeypatch, idle_machine):
    """In flight there is rate x E2E, unknown before the round; the round's requests bound it."""
    monkeypatch.setattr(shards_module, "cores_available", lambda: 8)
    assert shards_for(_auto(), Shape(128, 64, rate_rps=4.0), requests=32) == 1
    assert shards_for(_auto(), Shape(128, 64, rate_rps=20.0), requests=160) == 3


def test_a_fixed_number_of_processes_is_taken_as_given_up_to_the_streams(monkeypatch):
    monkeypatch.setattr(shards_module, "cores_available", lambda: 1)
    fixed = LoadSettings(client_processes=3)
    assert shards_for(fixed, Shape(128, 64, 64)) == 3  # more than the cores: the user asked
    assert shards_for(fixed, Shape(128, 64, 2)) == 2  # never more processes than streams
    assert shards_for(LoadSettings(client_processes=1), Shape(128, 64, 512)) == 1


def test_the_cores_available_are_this_process_s_affinity_not_the_machine_s():
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")  # macOS: cores_available is os.cpu_count()
    assert cores_available() == len(os.sched_getaffinity(0))
    code = ("import os; from tasks.load.shards import cores_available; "
            "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); print(cores_available())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


# ---- the client_shards rows ------------------------------------------------------------------------


def _round(ctx, shards: int, rate_rps: float | None = None, concurrency: int = 6, requests: int = 24):
    shape = Shape(32, 16, concurrency) if rate_rps is None else Shape(32, 16, rate_rps=rate_rps)
    plan = RoundPlan(scenario="short", shape=shape, round=1, requests=requests,
                     first_encounter=False, shards=shards, arrival_seed=7)

    async def go():
        async with new_session() as session:
            with ctx.run_dir.rows("requests", "sim", f"p{shards}-{rate_rps}") as out:
                return await run_round(ctx, session, plan, out)

    return run_async(go())


def _shard_rows(ctx, shards: int, rate_rps: float | None = None) -> list[dict]:
    return [r for r in ctx.run_dir.read_rows("client_shards", "sim")
            if r["shards"] == shards and r["rate_rps"] == rate_rps]


@pytest.mark.parametrize("rate_rps", [None, 40.0], ids=["closed", "open"])
def test_a_round_of_one_process_records_shard_0_on_its_own_clock_with_the_cpu_it_got(ref_server, make_ctx, rate_rps):
    ctx = make_ctx(ref_server.url, "vllm")
    outcome = _round(ctx, 1, rate_rps)
    (row,) = _shard_rows(ctx, 1, rate_rps)
    assert {k: row[k] for k in ("run_id", "engine", "scenario", "round", "concurrency", "rate_rps", "input_tokens",
                                "output_tokens", "warmup", "shards", "shard", "requests", "offset_s",
                                "uncertainty_s")} == {
        "run_id": "test-run", "engine": "sim", "scenario": "short", "round": 1,
        # the load is the concurrency (closed) or the rate (open), never both
        "concurrency": 6 if rate_rps is None else None, "rate_rps": rate_rps,
        "input_tokens": 32, "output_tokens": 16, "warmup": False, "shards": 1, "shard": 0, "requests": 24,
        "offset_s": 0.0, "uncertainty_s": 0.0}
    # 24 requests of 20 ms + 15 x 10 ms, 6 at a time (closed) or over ~0.6 s of arrivals (open)
    assert 0.5 < row["wall_s"] < 10 and 0 < row["cpu_s"] < 10 * row["wall_s"]
    if sys.platform == "linux":
        assert row["waited_s"] is not None and 0 <= row["waited_s"] <= row["wall_s"]
        assert row["waited_share"] == pytest.approx(row["waited_s"] / row["wall_s"])
    assert [(s.shard, s.requests) for s in outcome.shards] == [(0, 24)]


def test_a_sharded_round_records_each_process_s_clock_offset_and_cpu(ref_server, make_ctx):
    ctx = make_ctx(ref_server.url, "vllm")
    outcome = _round(ctx, 3)
    rows = sorted(_shard_rows(ctx, 3), key=lambda r: r["shard"])
    assert [(r["shard"], r["requests"]) for r in rows] == [(0, 8), (1, 8), (2, 8)]  # dealt round-robin
    for r in rows:
        # one host, one clock: each offset is within its ping's uncertainty (plus scheduling slack)
        assert 0 < r["uncertainty_s"] < 0.05 and abs(r["offset_s"]) <= r["uncertainty_s"] + 0.002, r
        assert 0.3 < r["wall_s"] < 10 and r["cpu_s"] > 0, r
        if sys.platform == "linux":
            assert r["waited_s"] is not None and 0 <= r["waited_share"] <= 1
    assert [s.offset_s for s in outcome.shards] == [r["offset_s"] for r in rows]


_VALIDATE = """
import json, sys
from tasks.state.tables import to_frame
from tasks.publish.validate import validate_frames
docs = json.load(sys.stdin)
print(json.dumps({k: validate_frames({"client_shards": to_frame("client_shards", rows)})["client_shards"]
                  for k, rows in docs.items()}))
"""


def test_the_client_shards_rows_validate_against_their_suite_and_bad_ones_fail(ref_server, make_ctx):
    ctx = make_ctx(ref_server.url, "vllm")
    _round(ctx, 1)
    _round(ctx, 2, concurrency=4)  # another round: a partition of its own
    rows = ctx.run_dir.read_rows("client_shards", "sim")
    assert len(rows) == 3
    bad = [
        {**rows[0], "waited_share": 1.5},             # more than the whole round
        {**rows[1], "wall_s": -1.0},                  # a negative time
        rows[1],                                      # the same process of the same round twice
        {**rows[2], "uncertainty_s": None},           # an offset without its uncertainty
    ]
    # Great Expectations in a process of its own: its heap would make every later round's opening
    # gc.collect() (tasks/load/client.py gc_paused) stall this process's loop for a third of a second.
    out = subprocess.run([sys.executable, "-c", _VALIDATE], cwd=ROOT, input=json.dumps({"good": rows, "bad": bad}),
                         capture_output=True, text=True, check=True)
    results = json.loads(out.stdout.strip().splitlines()[-1])
    assert results["good"]["success"], results["good"]
    failed = {(f["expectation"], f["kwargs"].get("column")) for f in results["bad"]["failed"]}
    assert not results["bad"]["success"]
    assert {("expect_column_values_to_be_between", "waited_share"), ("expect_column_values_to_be_between", "wall_s"),
            ("expect_compound_columns_to_be_unique", None),
            ("expect_column_values_to_not_be_null", "uncertainty_s")} <= failed, failed


def test_the_short_scenario_gets_the_processes_the_run_config_asks_for(ref_server, make_ctx, short, monkeypatch):
    """From the run config through run_perf's RoundPlan: auto at 2 streams a process on 2 free cores."""
    from tasks.scenarios.perf import run_perf

    monkeypatch.setattr(shards_module, "free_cores", lambda pids: shards_module.FreeCores(2, "2 cores free"))
    ctx = make_ctx(ref_server.url, "vllm", scenarios=short([1, 4], rounds=1, requests=8),
                   load={"client_processes": "auto", "streams_per_process": 2})
    run_perf(ctx, "short")
    rows = ctx.run_dir.read_rows("client_shards", "sim")
    assert sorted((r["concurrency"], r["shard"], r["shards"], r["requests"]) for r in rows) == [
        (1, 0, 1, 8), (4, 0, 2, 4), (4, 1, 2, 4)]


# ---- the report ------------------------------------------------------------------------------------


def test_the_report_names_the_rounds_whose_client_waited_for_a_core(tmp_path):
    from tasks.report.html import render_html
    from tasks.report.summary import build_summary
    from tasks.state.storage import RunDir

    cfg = parse_run_config({"run_id": "rep", "engines": [{"name": "eng", "dialect": "sglang"}]})
    run_dir = RunDir("rep", root=tmp_path)
    base = {"run_id": "rep", "engine": "eng", "image_digest": None, "scenario": "short", "rate_rps": None,
            "input_tokens": 128, "output_tokens": 64, "warmup": False, "offset_s": 0.0, "uncertainty_s": 0.0,
            "wall_s": 10.0}
    with run_dir.rows("client_shards", "eng", "short") as out:
        out.write({**base, "concurrency": 64, "round": 1, "shards": 1, "shard": 0, "cpu_s": 4.0,
                   "waited_s": 0.1, "waited_share": 0.01})
        for shard, waited in ((0, 0.2), (1, 0.8)):  # one process of the round waited 8%
            out.write({**base, "concurrency": 256, "round": 2, "shards": 2, "shard": shard, "cpu_s": 7.0,
                       "waited_s": waited, "waited_share": waited / 10.0})
        out.write({**base, "scenario": "warmup", "warmup": True, "concurrency": 256, "round": 1, "shards": 2,
                   "shard": 0, "cpu_s": 9.0, "waited_s": 5.0, "waited_share": 0.5})  # warmup: not shown
    (load,) = build_summary(run_dir, cfg).engines["eng"].client_load
    assert (load.scenario, load.rounds, load.processes) == ("short", 2, 2)
    assert load.cpu_cores == pytest.approx(1.4) and load.waited_share == pytest.approx(0.08)
    assert load.busy_rounds == ["c=256 round 2: 8%"]
    page = render_html(build_summary(run_dir, cfg), charts={})
    assert "The CPU the load client got" in page
    assert "<span class='badge fail'>1 of 2</span>" in page and "c=256 round 2: 8%" in page
    assert "50%" not in page.split("The CPU the load client got")[1].split("</table>")[0]
