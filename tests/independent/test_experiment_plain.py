"""An experiment through the pipeline against servers written for the test (not DayOne's simulator).

The experiment's one factor is the endpoint: three plain servers, the base (4 ms between tokens), one
twice as fast (2 ms) and one identical to the base. `dag.test()` runs them as variants up together,
their rounds alternating; the effects come from paired rounds. The faster one must be called better
with an interval that excludes 1, and the identical one must get an interval around 1, in summary.json
and in report.html, where the design and each variant's diff are stated.
"""

from __future__ import annotations

from datetime import datetime, timezone
import pytest
from plain_pipeline import external, run_pipeline_decided, scenarios
from plain_server import MODEL, TokenGap2ms, TokenGap4ms

OUTPUT_TOKENS = 24


@pytest.fixture(scope="module")
def experiment_run(airflow_db, s3_server, tmp_path_factory):
    with TokenGap4ms() as base, TokenGap2ms() as faster, TokenGap4ms() as same:
        run_dir = run_pipeline_decided({
            "model": {"name": MODEL, "context_limit_tokens": 4096},
            "engines": [external("plain", base.url)],
            "experiment": {"base": "plain", "factors": [
                {"setting": "endpoint", "levels": [base.url, faster.url, same.url]}]},
            "scenarios": scenarios(short={"input_tokens": 16, "output_tokens": OUTPUT_TOKENS, "concurrency": [2],
                                          "rounds": 4, "requests_per_round": 8}),
            "archive": {"bucket": "experiments"},
            "request_timeout_s": 30,
        }, s3_server, tmp_path_factory.mktemp("experiment-runs"), datetime(2026, 12, 1, 11, 0, tzinfo=timezone.utc),
            decided=lambda run_dir: _output_tps(run_dir.read_json("summary.json") or {}, "plain-v1").get("verdict")
            == "better")
    summary = run_dir.read_json("summary.json")
    assert summary is not None, "no summary.json; see the step outcomes under state/steps"
    # variants in the levels' order; a URL names none of them (a host must not reach the archive)
    faster_name, same_name = (v["engine"] for v in summary["experiment"]["variants"])
    assert (faster_name, same_name) == ("plain-v1", "plain-v2")
    return summary, run_dir.read_bytes("report.html").decode("utf-8"), {"faster": faster_name, "same": same_name}


def _output_tps(summary: dict, engine: str) -> dict:
    """The engine's output throughput against the base's ({} when not compared)."""
    found = [c for c in summary.get("comparisons", []) if (c["scenario"], c["figure"], c["engine"]) ==
             ("short", "output_tps", engine)]
    return found[0] if len(found) == 1 else {}


def test_the_variants_were_measured_together_and_paired(experiment_run):
    summary, _, engine = experiment_run
    assert summary["measurement_design"] == "interleaved"
    assert len(summary["engine_order"]) == 1 and set(summary["engine_order"][0]) == {"plain", *engine.values()}
    assert all(c["paired"] for c in summary["comparisons"]), summary["comparisons"]


def test_the_faster_server_is_better_with_an_interval_that_excludes_1(experiment_run):
    summary, _, engine = experiment_run
    c = _output_tps(summary, engine["faster"])
    assert c, summary["comparisons"]
    # 24 tokens: about 10 + 23 x 4 ms against 10 + 23 x 2 ms a request, so roughly 1.8x the throughput
    assert c["verdict"] == "better" and c["base"] == "plain", c
    assert 1 < c["low"] <= c["ratio"] <= c["high"] and c["ratio"] > 1.3, c


def test_the_identical_server_gets_an_interval_around_1(experiment_run):
    summary, _, engine = experiment_run
    c = _output_tps(summary, engine["same"])
    assert c, summary["comparisons"]
    # within 5% of no change, or on a machine busy enough that the run could not detect 5%, within the change
    # it could detect: a 95% interval misses no change in one run of twenty by design, and then by less than
    # that (ratio 1.050 against a detectable 6.4%, interval from 1.003, under two CPU hogs)
    assert abs(c["ratio"] - 1) <= max(0.05, c["detectable"]) or c["low"] <= 1 <= c["high"], c
    assert c["low"] <= 1.03 and c["high"] >= 0.97, c  # within 3% of no change, whatever the verdict


def test_the_report_states_the_design_and_each_variants_diff(experiment_run):
    summary, html, engine = experiment_run
    assert "interleaved:" in html and "rounds alternating ABBA" in html
    variants = html[html.index("id='variants'"):html.index("</table>", html.index("id='variants'"))]
    assert "(base)" in variants and "endpoint" in variants
    for name in engine.values():
        assert name in variants
    effects = html[html.index("id='effects'"):]
    assert f"{engine['faster']} vs plain (paired)" in effects
