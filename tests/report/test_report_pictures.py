"""The report's pictures say what they show (tasks/report/charts.py, plotting.py, templates/), on the summary
of a real `make demo` run (llamacpp-ab: one concurrency level, a 135M model that answers no item right):
one level draws no line, a log axis carries no bars, a model that answers nothing gets one line and no
parity table, and the decision comes first, under the run's header."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tasks.report.schema import RunSummary, read_summary

DEMO_SUMMARY = Path(__file__).parent / "fixtures" / "llamacpp-ab-summary.json"


@pytest.fixture()
def summary() -> RunSummary:
    return read_summary(json.loads(DEMO_SUMMARY.read_text(encoding="utf-8")))


@pytest.fixture()
def drawn(monkeypatch):
    """Every matplotlib figure the charts draw, by chart, instead of their PNG bytes."""
    from tasks.report import charts, frontier

    figures = []

    def keep(fig):
        figures.append(fig)
        return b"png"

    monkeypatch.setattr(charts, "png_bytes", keep)
    monkeypatch.setattr(frontier, "png_bytes", keep)
    return figures


def _lines(fig, points: int = 1) -> list:
    """Artists drawn as a line through `points` points or more (errorbar whiskers are collections, and a marker
    alone has no line style)."""
    return [line for ax in fig.axes for line in ax.get_lines()
            if line.get_linestyle() not in ("None", "", " ") and len(set(line.get_xdata())) >= points]


def _with_second_level(summary: RunSummary) -> RunSummary:
    """The same run as if each engine had also measured the short scenario at c=8."""
    doc = summary.model_dump(mode="json", by_alias=True)
    for engine in doc["engines"].values():
        levels = engine["perf"]["short"]["levels"]
        levels.append({**levels[0], "label": "c=8", "concurrency": 8})
    return read_summary(doc)


def test_one_concurrency_level_is_points_with_intervals_not_a_line(summary, drawn):
    from tasks.report.charts import throughput_chart

    assert {len(e.levels("short")) for e in summary.engines.values()} == {1}
    throughput_chart(summary)
    [fig] = drawn
    assert not _lines(fig), "one level has no trend: no line, not even a lone dot of one"
    for ax in fig.axes:
        assert ax.get_xscale() == "linear", "engines side by side, not a concurrency axis with one tick"
        assert ax.collections, "each engine's point with its interval (whiskers) and rounds"
        assert "at c=4" in ax.get_title(loc="left")
        assert [t.get_text() for t in ax.get_xticklabels()] == list(summary.engines)
    drawn.clear()
    throughput_chart(_with_second_level(summary))
    [fig] = drawn
    assert len(_lines(fig, points=2)) == 2 * len(summary.engines), "two levels: a line per engine and panel"


def test_no_bars_on_a_log_axis(summary, drawn):
    from matplotlib.patches import Rectangle

    from tasks.report.charts import render_charts

    render_charts(summary)
    logged = [ax for fig in drawn for ax in fig.axes if "log" in (ax.get_yscale(), ax.get_xscale())]
    assert logged, "the TTFT chart keeps its log axis"
    for ax in logged:
        bars = [p for p in ax.patches if isinstance(p, Rectangle)]
        assert not bars, f"{ax.get_title()!r}: {len(bars)} bars on a log axis"


def test_a_model_that_answers_nothing_gets_one_line_and_no_answer_parity(summary):
    from tasks.report.html import render_html

    page = render_html(summary, charts={})
    answers = page[page.index("<h2 id='quality'>"):page.index("<h2", page.index("<h2 id='quality'>") + 1)]
    text = re.sub(r"<[^>]+>", "", answers)
    assert "No engine answered any item right (llamacpp 0 of 14, llamacpp-parallel4 0 of 14)" in text
    assert "answer parity is left out" in text
    assert "<table" not in answers and "answered wrong" not in answers, "one line, not the table of 0/2s"
    assert "class='parity'" not in page and "no detectable difference</td>" not in page
    # one item right on one engine: the table and the parity verdicts are back
    doc = summary.model_dump(mode="json", by_alias=True)
    doc["engines"]["llamacpp"]["quality"]["families"]["arithmetic"]["correct"] = 1
    page = render_html(read_summary(doc), charts={})
    assert "No engine answered any item right" not in page
    assert "<table class='quality'>" in page and "<table class='parity'>" in page


def test_the_decision_and_the_choice_come_first_under_the_run_header(summary):
    from tasks.report.html import render_html

    page = render_html(summary, charts={})
    order = [page.index(mark) for mark in (
        "<table class='meta'>",  # the run's header
        "<h2 id='decision'>",
        "<h3 id='choice'>",
        "<h2 id='engines'>",
        "<h3 id='variants'>",
        "<th>engine</th><th>dialect</th>",  # each engine's basics
        "<h2 id='comparison'>",
    )]
    assert order == sorted(order), order
    between = page[page.index("</table>", order[0]):order[1]]
    assert "<table" not in between and "<h2" not in between, "nothing between the header and the decision"
