"""GPU telemetry per round against the simulator's DCGM-style exporter: its values follow the load
and, like dcgm-exporter's, change only at its refreshes; a round's telemetry_rounds row (energy and
joules per output token held against the simulator's exact energy integral, within the one refresh
each end may be stale); a round shorter than ten refreshes publishes no energy of its own; a counter
reset voids the energy; and a run config without a DCGM endpoint is refused."""

from __future__ import annotations

import contextlib
import time

import httpx
import pytest

from engine_rounds_helpers import one_round
from tasks.config import ConfigError, parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.telemetry import gpu as telemetry
from tasks.load.plan import Shape
from tasks.state.storage import RunDir

SLOTS = 8
SHAPE = Shape(input_tokens=64, output_tokens=40, concurrency=4)
REQUESTS = 12
IDLE_W, BUSY_W = 0.0, 800.0  # idle 0: the energy counter moves only while requests run
REFRESH_S = 0.05  # the simulator's exporter refresh here; dcgm-exporter's default is 30 s


def gpus(**extra):
    return {"count": 2, "idle_power_w": IDLE_W, "busy_power_w": BUSY_W, "weights_mib": 1000.0,
            "kv_cache_mib": 4000.0, "exporter_refresh_s": REFRESH_S, **extra}


def context(url: str, root, interval_s: float = 0.02) -> EngineContext:
    cfg = parse_run_config({"run_id": "telemetry", "engines": [{"name": "eng", "dialect": "vllm"}],
                            "telemetry": {"enabled": True, "interval_s": interval_s}})
    return EngineContext(cfg, endpoint_for(cfg, "eng", url, "sha256:" + "0" * 64), RunDir("telemetry", root=root))


def telemetry_row(ctx: EngineContext, round_: int = 1) -> dict:
    rows = [r for r in ctx.run_dir.read_rows("telemetry_rounds", "eng") if r["round"] == round_]
    assert len(rows) == 1, rows
    return rows[0]


def reading(sim) -> telemetry.GpuReading:
    return telemetry.parse_reading(httpx.get(sim.url + telemetry.SIMULATOR_PATH, timeout=5).text)


def test_the_simulators_dcgm_exporter_follows_its_load(sims):
    sim = sims("vllm", {"slots": SLOTS, "itl_s": 0.05, "gpus": gpus(idle_power_w=100.0)})
    idle = reading(sim)
    assert len(idle.gpus) == 2 and all(u.startswith("GPU-") for u in idle.gpus)
    assert idle.mean(telemetry.GPU_UTIL) == 0 and idle.total(telemetry.POWER_USAGE) == 200.0
    assert idle.total(telemetry.FB_USED) == 2000.0
    # Four streams of 10 s each (200 x 50 ms), all held open until the reading is taken, then closed: the
    # four run together however late one starts. Looked for on the clock, not a count of reads.
    body = {"model": "dayone-sim-model", "prompt": "x", "max_tokens": 200, "ignore_eos": True, "stream": True}
    with contextlib.ExitStack() as streams:
        for _ in range(4):
            streams.enter_context(httpx.stream("POST", sim.url + "/v1/completions", json=body, timeout=30))
        deadline = time.monotonic() + 20
        while (busy := reading(sim)).mean(telemetry.GPU_UTIL) != 50.0 and time.monotonic() < deadline:
            time.sleep(0.01)  # four of eight slots held: 50%
    assert busy.mean(telemetry.GPU_UTIL) == 50.0
    assert busy.total(telemetry.POWER_USAGE) == pytest.approx(2 * (100 + (BUSY_W - 100) * 0.5))
    assert busy.total(telemetry.FB_USED) > 2000.0  # KV held by the running requests
    time.sleep(2 * REFRESH_S)
    after = reading(sim)
    assert after.total(telemetry.TOTAL_ENERGY) > busy.total(telemetry.TOTAL_ENERGY) > idle.total(telemetry.TOTAL_ENERGY)


def test_a_rounds_joules_per_token_are_the_simulators_energy_over_its_output_tokens(sims, tmp_path):
    sim = sims("vllm", {"slots": SLOTS, "itl_s": 0.01, "gpus": gpus()})
    ctx = context(sim.url, tmp_path)
    busy_before = sim.state()["gpus"]["busy_slot_s"]
    one_round(ctx, SHAPE, REQUESTS)
    busy_after = sim.state()["gpus"]["busy_slot_s"]
    row = telemetry_row(ctx)
    # Idle power 0: the energy is (busy - idle) / slots per running request-second, on each of 2 GPUs.
    expected_j = 2 * BUSY_W / SLOTS * (busy_after - busy_before)
    tokens = sum(r["completion_tokens"] for r in sim.requests())
    assert tokens == REQUESTS * SHAPE.output_tokens
    assert row["energy_unpublished"] is None and row["unavailable"] is None
    # The exporter's refresh, measured from when its values changed (sampled every 20 ms; a refresh
    # missed while the sampler waited for a core only makes it look longer).
    assert REFRESH_S - 0.02 <= row["exporter_refresh_s"] <= 2 * REFRESH_S + 0.02
    # Each end reads a value up to one refresh old: off by at most one refresh of the peak power.
    assert row["energy_j"] == pytest.approx(expected_j, abs=row["power_peak_w"] * REFRESH_S)
    assert row["ok_output_tokens"] == tokens
    assert row["energy_per_output_token_j"] == pytest.approx(row["energy_j"] / tokens, rel=1e-9)
    assert row["gpus"] == 2 and len(row["gpu_uuids"]) == 2
    assert row["samples"] >= 3
    # Four streams on eight slots: utilization at most 50%, power at most 2 x 400 W.
    assert 0 < row["gpu_util_mean_pct"] <= row["gpu_util_peak_pct"] == 50.0
    assert 0 < row["power_mean_w"] <= row["power_peak_w"] == pytest.approx(2 * BUSY_W * 0.5)
    assert row["memory_used_peak_mib"] > 2000.0
    assert row["readings"][0][0] == 0 and len(row["readings"]) == row["samples"] + 2
    assert row["not_exposed"] is None


def test_an_energy_counter_reset_voids_the_rounds_energy_with_its_reason(sims, tmp_path):
    sim = sims("vllm", {"slots": SLOTS, "itl_s": 0.01, "gpus": gpus(energy_reset_after_requests=5)})
    ctx = context(sim.url, tmp_path)
    one_round(ctx, SHAPE, REQUESTS)
    row = telemetry_row(ctx)
    assert row["energy_j"] is None and row["energy_per_output_token_j"] is None
    assert telemetry.TOTAL_ENERGY in row["energy_unpublished"] and "reset" in row["energy_unpublished"]
    assert row["power_mean_w"] > 0  # the gauges stand


def test_an_engine_without_a_dcgm_endpoint_is_refused_when_telemetry_is_on():
    with pytest.raises(ConfigError, match="telemetry.dcgm_url"):
        parse_run_config({"engines": [{"name": "ext", "dialect": "vllm", "launcher": "external",
                                       "endpoint": "http://127.0.0.1:1"}], "telemetry": {"enabled": True}})
    cfg = parse_run_config({"engines": [{"name": "ext", "dialect": "vllm", "launcher": "external",
                                         "endpoint": "http://127.0.0.1:1"}],
                            "telemetry": {"enabled": True, "engines": {"ext": {"dcgm_url": "http://127.0.0.1:9400/metrics"}}}})
    source = telemetry.source_for(cfg, "ext", "http://127.0.0.1:1", ["GPU-a"])
    assert source.url == "http://127.0.0.1:9400/metrics" and source.gpu_uuids == ("GPU-a",)
    assert parse_run_config({}).telemetry.enabled is False


def test_the_simulators_exporter_holds_its_values_between_refreshes(sims):
    # A 2 s refresh: a read within 1 s of one is in the same refresh even when a loaded machine takes a
    # few hundred ms to answer (0.5 s and 0.25 s failed under two CPU hogs).
    sim = sims("vllm", {"slots": SLOTS, "gpus": gpus(idle_power_w=100.0, exporter_refresh_s=2.0)})
    for _ in range(5):  # a busy machine may delay a read past the refresh: look again at the next one
        first = reading(sim)
        deadline = time.monotonic() + 6
        while (again := reading(sim)).gpus == first.gpus and time.monotonic() < deadline:
            time.sleep(0.01)
        refreshed = time.monotonic()
        assert again.gpus != first.gpus  # idle power: the energy counter moves at each refresh
        same = reading(sim)
        if time.monotonic() - refreshed < 1.0:  # well within the same refresh
            break
    else:
        pytest.fail("no second read came within 1 s of a refresh in five tries")
    assert same.gpus == again.gpus
    time.sleep(2.1)
    assert reading(sim).gpus != again.gpus


def test_a_round_shorter_than_ten_refreshes_of_the_default_exporter_publishes_no_energy_of_its_own(sims, tmp_path):
    """dcgm-exporter's 30 s default, which the simulator's exporter now keeps: a one-second round sees
    no refresh, and before its energy (the simulator's exact integral) was published all the same."""
    profile_gpus = gpus()
    del profile_gpus["exporter_refresh_s"]  # the profile's default
    sim = sims("vllm", {"slots": SLOTS, "itl_s": 0.01, "gpus": profile_gpus})
    ctx = context(sim.url, tmp_path)
    one_round(ctx, SHAPE, REQUESTS)
    row = telemetry_row(ctx)
    assert row["energy_j"] is None and row["energy_per_output_token_j"] is None
    assert row["exporter_refresh_s"] is None and row["energy_void"] is None
    assert "the exporter's values changed 0 times" in row["energy_unpublished"]
    assert row["power_mean_w"] is not None  # the gauges stand, as the exporter served them
