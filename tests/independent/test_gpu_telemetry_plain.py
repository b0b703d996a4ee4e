"""GPU telemetry against a DCGM exporter written for the test (tests/independent/dcgm_exporter.py),
which refreshes its values on an interval of its own as dcgm-exporter does, with a plain server as
the engine; each figure read through the rounds DayOne runs and the summary and report that publish it.

Before: the energy of a round shorter than the exporter's refresh (zero or one jump of the counter)
was published as joules per token; a read that failed in the middle of a round was skipped; with no
GPU UUIDs known the energy of every GPU the exporter reported was charged to the engine; and nothing
measured the exporter's refresh.
"""

from __future__ import annotations

import pytest
from dcgm_exporter import DcgmExporter
from plain_server import MODEL, PlainServer

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.rounds import RoundPlan, run_round
from tasks.report.html import render_html
from tasks.report.summary import build_summary
from tasks.state.storage import RunDir

GPUS = ["GPU-aaaa", "GPU-bbbb"]
SHAPE = Shape(input_tokens=8, output_tokens=50, concurrency=4)
MIN_REFRESHES = 10  # energy's window, in the exporter's refreshes (PROTOCOL.md, telemetry)
REQUESTS = 8  # two waves of 50 tokens: a round of about 0.45 s 4 ms apart (Engine), 2 s 20 ms apart (PacedEngine)


class Engine(PlainServer):
    token_delay_s = 0.004


class PacedEngine(PlainServer):
    """Rounds of about 2 s made of the server's own pauses, so a loaded machine stretches them little: the
    energy rule's tests need a round's length against the exporter's refresh to hold however busy it is."""

    token_delay_s = 0.02


def _context(root, dcgm_url: str, uuids: list[str] | None) -> EngineContext:
    engine_telemetry = {"dcgm_url": dcgm_url, **({"gpu_uuids": uuids} if uuids else {})}
    cfg = parse_run_config({"run_id": "gpus", "model": {"name": MODEL},
                            "engines": [{"name": "eng", "dialect": "openai", "launcher": "external",
                                         "endpoint": "http://127.0.0.1:1"}],
                            "telemetry": {"enabled": True, "interval_s": 0.02, "engines": {"eng": engine_telemetry}}})
    return cfg


def _rounds(exporter: DcgmExporter, root, uuids: list[str] | None = GPUS, rounds: int = 1, shape: Shape = SHAPE,
            server: type[PlainServer] = Engine):
    """`rounds` measured rounds of one shape back to back; the run's summary."""
    with server() as engine:
        cfg = _context(root, exporter.url + "/metrics", uuids)
        ctx = EngineContext(cfg, endpoint_for(cfg, "eng", engine.url, None), RunDir("gpus", root=root))

        async def go() -> None:
            async with new_session(ctx.endpoint.adapter.keeps_alive_after_stream) as session:
                with ctx.run_dir.rows("requests", "eng", "short") as out:
                    for n in range(1, rounds + 1):
                        plan = RoundPlan(scenario="short", shape=shape, round=n, requests=REQUESTS, first_encounter=False)
                        await run_round(ctx, session, plan, out)

        run_async(go())
    return ctx, build_summary(ctx.run_dir, cfg).engines["eng"]


def test_a_round_shorter_than_ten_refreshes_publishes_no_energy_and_says_why(tmp_path):
    refresh = 0.5  # a round of about 2 s: several refreshes seen, far fewer than ten
    with DcgmExporter(GPUS, refresh_s=refresh) as exporter:
        ctx, engine = _rounds(exporter, tmp_path, server=PacedEngine)
    row = ctx.run_dir.read_rows("telemetry_rounds", "eng")[0]
    # Measured from when its values changed: a change is seen up to one gap between reads late, so a
    # refresh seen late followed by one seen on time looks shorter by at most the longest such gap (20 ms
    # on a quiet machine, more when the sampler waits for a core); a refresh the sampler missed can only
    # make it look longer, up to the span of its first and last read, never like an exporter that
    # recomputes on every read.
    late_s = exporter.longest_read_gap_s()
    assert refresh - late_s - 0.005 <= row["exporter_refresh_s"] <= max(6 * refresh, row["ended_ts"] - row["started_ts"])
    assert row["energy_j"] is None and row["energy_per_output_token_j"] is None, row
    assert "of the exporter's refreshes (one every" in row["energy_unpublished"]
    published = engine.telemetry_rounds[0]
    assert published.energy_per_output_token_j is None and "energy needs 10" in published.why_missing
    assert published.power_mean_w == pytest.approx(600.0)  # the gauges stand


def test_a_levels_rounds_together_span_enough_refreshes_and_publish_joules_per_token_near_the_truth(tmp_path):
    refresh = 0.5  # rounds of about 2 s: each alone spans about four refreshes, the four together sixteen
    with DcgmExporter(GPUS, refresh_s=refresh) as exporter:
        ctx, engine = _rounds(exporter, tmp_path, rounds=4, server=PacedEngine)
    rows = sorted(ctx.run_dir.read_rows("telemetry_rounds", "eng"), key=lambda r: r["round"])
    assert all(r["energy_j"] is None for r in rows)  # each round alone is too short
    [window] = engine.telemetry_windows
    assert window.scenario == "short" and window.level == "c=4" and window.rounds == 4
    assert window.why_missing is None, window.why_missing
    assert window.refreshes >= MIN_REFRESHES and window.idle_share <= 0.25
    truth_j = exporter.energy_j(rows[0]["started_ts"], rows[-1]["ended_ts"])
    # Each end reads a value up to one refresh old: off by less than one refresh of the GPUs' power.
    assert window.energy_j == pytest.approx(truth_j, abs=len(GPUS) * exporter.power_w * refresh)
    assert window.ok_output_tokens == 4 * REQUESTS * SHAPE.output_tokens
    assert window.energy_per_output_token_j == pytest.approx(window.energy_j / window.ok_output_tokens)
    page = render_html(build_summary(ctx.run_dir, ctx.config), charts={})
    assert f"{window.energy_per_output_token_j:.4f} J" in page


def test_the_exporters_own_timestamps_give_its_refresh(tmp_path):
    with DcgmExporter(GPUS, refresh_s=0.1, timestamps=True) as exporter:
        ctx, _ = _rounds(exporter, tmp_path)
    row = ctx.run_dir.read_rows("telemetry_rounds", "eng")[0]
    assert row["exporter_refresh_s"] == pytest.approx(0.1, abs=0.002)  # ms stamps, not the 20 ms sampling


def test_with_no_gpu_uuids_known_no_energy_is_charged_to_the_engine(tmp_path):
    node = [*GPUS, "GPU-cccc", "GPU-dddd"]  # the node's four GPUs; the engine was given some of them
    with DcgmExporter(node, refresh_s=0.02) as exporter:
        ctx, engine = _rounds(exporter, tmp_path, uuids=None)
    row = ctx.run_dir.read_rows("telemetry_rounds", "eng")[0]
    assert row["gpus"] == 4 and row["gpus_known"] is False
    assert row["energy_j"] is None and "the engine's GPUs are not known" in row["energy_unpublished"], row
    assert "the engine's GPUs are not known" in engine.telemetry_windows[0].why_missing


@pytest.mark.parametrize("hole,words", [("fail", "could not be read"), ("empty", "came back without counters")])
def test_a_read_that_failed_between_two_good_ones_voids_the_energy(hole, words, tmp_path):
    with DcgmExporter(GPUS, refresh_s=0.02, hole_at_read=4, hole=hole) as exporter:
        ctx, engine = _rounds(exporter, tmp_path)
    row = ctx.run_dir.read_rows("telemetry_rounds", "eng")[0]
    assert row["energy_j"] is None and words in row["energy_unpublished"], row
    assert engine.telemetry_windows[0].energy_j is None and words in engine.telemetry_windows[0].why_missing


def test_control_a_round_of_ten_refreshes_is_published_alone(tmp_path):
    with DcgmExporter(GPUS, refresh_s=0.02) as exporter:
        ctx, engine = _rounds(exporter, tmp_path)
    row = ctx.run_dir.read_rows("telemetry_rounds", "eng")[0]
    assert row["energy_unpublished"] is None, row
    truth_j = exporter.energy_j(row["started_ts"], row["ended_ts"])
    assert row["energy_j"] == pytest.approx(truth_j, abs=len(GPUS) * exporter.power_w * 0.02)
