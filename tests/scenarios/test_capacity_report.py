"""The report's capacity part: per engine the found capacity and every probe in summary.json, the
chart of goodput share against load with each capacity marked, and its section of the page."""

from __future__ import annotations

import pytest

import tasks.scenarios.capacity as capacity
from capacity_helpers import fake_context
from tasks.state import documents as run_documents
from tasks.config import parse_run_config
from tasks.report import build_summary, read_summary, render_html
from tasks.report.charts import render_charts

PLANTED = {"fast": 12, "slow": 5}


def _search(tmp_path, rounds_of_shares, slo):
    for engine, planted in PLANTED.items():
        rounds_of_shares(lambda load, n, planted=planted: 1.0 if load <= planted else 0.2)
        ctx = fake_context(tmp_path, engine=engine, slo=slo, start=3, max=32, rounds=2)
        ctx.run_dir.write_json(run_documents.perf_summary_doc(engine, "capacity"), capacity.run_capacity(ctx))
    cfg = parse_run_config({"run_id": "probe-rounds", "engines": [{"name": e, "dialect": "openai"} for e in PLANTED],
                            "slo": slo, "scenarios": {"capacity": {"enabled": True, "start": 3, "max": 32}}})
    return build_summary(ctx.run_dir, cfg)


@pytest.fixture()
def summary(tmp_path, rounds_of_shares):
    return _search(tmp_path, rounds_of_shares, {"e2e_s": 1.0})


def test_summary_carries_each_engines_capacity_and_every_probe(summary):
    for engine, planted in PLANTED.items():
        c = summary.engines[engine].capacity
        assert c is not None and c.outcome == "found" and c.capacity == planted and c.withheld is None
        assert c.bracket == [planted, planted + 1]
        assert [p.load for p in c.probes][:2] == [3, 6]
        assert all(p.verdict == ("pass" if p.load <= planted else "fail") for p in c.probes)
        assert f"{planted} concurrent requests" in c.text
    assert summary.scenarios.enabled["capacity"] is True
    again = read_summary(summary.model_dump(mode="json"))  # summary.json reads back as it was written
    assert again.engines["fast"].capacity == summary.engines["fast"].capacity


def test_the_chart_and_the_section_show_the_capacity(summary):
    charts = render_charts(summary)
    assert charts["capacity"].startswith(b"\x89PNG")
    page = render_html(summary, charts)
    assert "<h2 id='capacity'>Capacity under SLO</h2>" in page and "href='#capacity'" in page
    assert "<b>12 concurrent</b>" in page and "<b>5 concurrent</b>" in page
    assert "E2E ≤ 1.00 s" in page
    # one probe row per probe of each engine
    assert page.count("<td>bisect</td>") == sum(
        1 for e in summary.engines.values() for p in e.capacity.probes if p.phase == "bisect")


def test_no_capacity_section_when_the_search_did_not_run(tmp_path):
    from tasks.state.storage import RunDir

    cfg = parse_run_config({"run_id": "no-capacity", "engines": [{"name": "a", "dialect": "openai"}]})
    summary = build_summary(RunDir("no-capacity", root=tmp_path), cfg)
    assert summary.engines["a"].capacity is None
    assert "capacity" not in render_charts(summary)
    assert "Capacity under SLO" not in render_html(summary, {})


def test_a_capacity_judged_on_ttft_is_withheld_where_ttft_is_unreliable(tmp_path, rounds_of_shares):
    # The stand-in rounds carry no streamed events: streaming was never shown, so TTFT is not published.
    summary = _search(tmp_path, rounds_of_shares, {"ttft_s": 0.5})
    c = summary.engines["fast"].capacity
    assert not summary.engines["fast"].ttft_published
    assert c.capacity is None and "ttft_s" in c.withheld and c.outcome == "found"
    assert len(c.probes) > 3  # the measurements stay
    page = render_html(summary)
    assert "not published" in page and "<b>12 concurrent</b>" not in page


def test_the_decision_orders_capacities_only_where_one_passed_a_load_the_other_failed(summary):
    from tasks.report.decision import capacity_order

    leads = [d.text for d in summary.decision if d.topic == "leads"]
    assert ("Capacity under the SLO (goodput share >= 90%): fast 12 concurrent requests (13 failed); "
            "slow 5 concurrent requests (6 failed).") in leads, leads
    assert "capacity, slow vs fast: less: it failed at 6 concurrent requests; the base passed 12." in leads
    fast, slow = summary.engines["fast"].capacity, summary.engines["slow"].capacity
    assert capacity_order(fast, slow).startswith("more: it passed 12 concurrent requests; the base failed at 6")
    # a search brackets a capacity: brackets that overlap are not an order
    near = fast.model_copy(update={"bracket": [12, 16]})
    assert capacity_order(near, fast).startswith("no detectable difference: their brackets overlap ([12, 16) and [12, 13)")
    ceiling = fast.model_copy(update={"bracket": [13, None], "outcome": "at_least_max"})
    assert capacity_order(ceiling, fast).startswith("more: it passed 13")
    below = slow.model_copy(update={"bracket": [None, 3], "outcome": "below_start"})
    assert capacity_order(below, slow).startswith("less: it failed at 3")


def test_a_withheld_capacity_is_named_and_never_ordered(tmp_path, rounds_of_shares):
    summary = _search(tmp_path, rounds_of_shares, {"ttft_s": 0.5})
    leads = [d.text for d in summary.decision if d.topic == "leads"]
    line = next(t for t in leads if t.startswith("Capacity under the SLO"))
    assert "fast not published: judged on ttft_s" in line and "12 concurrent" not in line
    assert not [t for t in leads if t.startswith("capacity, ")]
    assert summary.engines["fast"].capacity.text.startswith("not published")
