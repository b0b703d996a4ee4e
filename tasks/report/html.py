"""report.html: one self-contained page (inline CSS, charts as base64 PNG) drawn from the run's summary.

Rendered by Jinja2 from templates/ with autoescaping on, so every value of the summary reaches the
page as text, never as markup. This module holds what the templates need beyond the summary: the
number formats (filters), the words for figures, and the few tables that take a little arithmetic
to lay out (comparison rows, needle grid, check matrix), all registered in `_environment`.

Order follows a reader's questions: what should I choose (decision summary, engine comparison),
did anything regress, then the evidence behind each claim, then what was not tested.
"""

from __future__ import annotations

import base64
import functools
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from tasks.core.progress import RUNNING, StepProgress, clock
from tasks.report.decision import LEAD_WORDS
from tasks.report.frontier import frontier, frontier_scenarios
from tasks.report.plotting import one_level
from tasks.report.schema import RunSummary
from tasks.report.schema.engine import EngineSummary
from tasks.report.schema.functional import Needle
from tasks.report.schema.perf import Figure
from tasks.stats.reliability import WITHHELD
from tasks.stats.effects import ratio_interval

TEMPLATES = Path(__file__).resolve().parent / "templates"

TOPICS = (
    ("leads", "Which engine leads where"),
    ("reliability", "What is unreliable, and why"),
    ("regressions", "Regressions against the last good run"),
    ("not_tested", "What was not tested"),
)

FIGURE_WORDS = {
    "output_tps": "output tok/s", "request_tps": "requests/s", "goodput_rps": "goodput req/s",
    "ttft_p50_s": "TTFT P50", "ttft_p95_s": "TTFT P95", "ttft_p99_s": "TTFT P99", "tpot_p50_s": "TPOT P50",
    "tpot_p95_s": "TPOT P95", "itl_p50_s": "ITL P50", "itl_p99_s": "ITL P99", "e2e_p50_s": "E2E P50",
    "e2e_p95_s": "E2E P95", "e2e_p99_s": "E2E P99",
}

# (scenario, figure, higher is better): the rows of the engine-vs-engine table of medians
COMPARED_FIGURES = (
    ("short", "output_tps", True), ("short", "ttft_p95_s", False), ("short", "e2e_p95_s", False),
    ("prefill", "output_tps", True), ("prefill", "ttft_p95_s", False), ("decode", "output_tps", True),
    ("decode", "tpot_p50_s", False), ("rate", "goodput_rps", True),
)

BADGE_CLASSES = {"pass": "pass", "fail": "fail", "effective": "pass", "unconfirmed": "fail", "ok": "pass",
                 "failed": "fail", "not_attempted": "na", "not_applicable": "na", "better": "pass",
                 "worse": "fail", "no detectable difference": "na", "not enough rounds": "na"}
SEVERITY_CLASSES = {"warning": "warn", "error": "fail"}


def render_html(summary: RunSummary, charts: dict[str, bytes] | None = None) -> str:
    """The page for one run; `charts` defaults to drawing them from the summary."""
    if charts is None:
        from tasks.report.charts import render_charts

        charts = render_charts(summary)
    encoded = {name: base64.b64encode(png).decode() for name, png in charts.items()}
    return _environment().get_template("report.html").render(summary=summary, charts=encoded)


PROGRESS_REFRESH_S = 15  # the in-progress page reloads itself (a meta refresh: the page runs no script)


@dataclass(frozen=True)
class EngineProgress:
    steps: list[StepProgress]  # in the order they started

    @property
    def done(self) -> list[StepProgress]:
        return [p for p in self.steps if p.state != RUNNING]

    @property
    def running(self) -> list[StepProgress]:
        return [p for p in self.steps if p.state == RUNNING]

    @property
    def states(self) -> dict[str, int]:
        return dict(Counter(p.state for p in self.done))

    @property
    def requests(self) -> int:
        return sum(p.load.done for p in self.steps if p.load)

    @property
    def failed_requests(self) -> int:
        return sum(p.load.failed for p in self.steps if p.load)


def render_progress(run_id: str, steps: list[StepProgress], now: float | None = None) -> str:
    """The page a reader gets before the run's report exists: each engine's steps done, the step running now
    with its round, and the requests failed so far (tasks/state/progress.py)."""
    import datetime as dt
    import time

    now = time.time() if now is None else now
    engines: dict[str, list[StepProgress]] = {}
    for p in steps:
        engines.setdefault(p.who, []).append(p)
    at = dt.datetime.fromtimestamp(now, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return _environment().get_template("progress.html").render(
        run_id=run_id, engines={who: EngineProgress(s) for who, s in engines.items()}, at=at, now=now,
        refresh_s=PROGRESS_REFRESH_S)


@functools.cache
def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=StrictUndefined,
        finalize=lambda value: "" if value is None else value,  # a missing detail is blank, not "None"
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(num=num, percent=percent, clip=clip, ttft_reason=ttft_reason, clock=clock)
    env.globals.update(ratio_interval=ratio_interval)
    env.globals.update(
        TOPICS=TOPICS, FIGURE_WORDS=FIGURE_WORDS, LEAD_WORDS=LEAD_WORDS, BADGE_CLASSES=BADGE_CLASSES,
        SEVERITY_CLASSES=SEVERITY_CLASSES,
        measured=measured, comparison_rows=comparison_rows, needle_table=needle_table, check_matrix=check_matrix,
        frontier=frontier, frontier_scenarios=frontier_scenarios, one_level=one_level,
        answered_none=answered_none,
    )
    return env


# ---- filters -------------------------------------------------------------------------------------


def num(value: Any, unit: str = "") -> str:
    """A figure for a table cell: seconds as ms below 1 s, fractions as percent, thousands grouped."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if unit == "s":
        return f"{value * 1000:,.1f} ms" if abs(value) < 1 else f"{value:,.2f} s"
    if unit == "%":
        return f"{value:.1%}"
    if isinstance(value, int) or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.3g}"


def percent(value: float | None, digits: int = 1, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:{'+' if signed else ''}.{digits}%}"


def clip(text: Any, limit: int) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def ttft_reason(reason: str) -> str:
    return reason.removeprefix(WITHHELD)


# ---- layouts that take arithmetic ----------------------------------------------------------------


def measured(engines: dict[str, EngineSummary], scenario: str) -> dict[str, EngineSummary]:
    """The engines with figures for `scenario`."""
    return {name: e for name, e in engines.items() if e.levels(scenario)}


@dataclass(frozen=True)
class ComparisonRow:
    what: str  # scenario and level
    figure: str
    higher_is_better: bool
    values: dict[str, Figure | None]  # every engine, None where it has no such figure


def comparison_rows(engines: dict[str, EngineSummary]) -> list[ComparisonRow]:
    """One row per compared figure and level that any engine published."""
    rows = []
    for scenario, figure, higher in COMPARED_FIGURES:
        labels: list[str] = []
        for e in engines.values():
            labels += [lv.label for lv in e.levels(scenario) if lv.label not in labels]
        for label in labels:
            values = {}
            for name, e in engines.items():
                level = next((lv for lv in e.levels(scenario) if lv.label == label), None)
                values[name] = None if level is None else level.figures.get(figure)
            if all(v is None for v in values.values()):
                continue
            rows.append(ComparisonRow(f"{scenario} {label}", figure, higher, values))
    return rows


@dataclass(frozen=True)
class NeedleCell:
    needle: Needle
    detail: str  # the answer, or why there was none


@dataclass(frozen=True)
class NeedleRow:
    scenario: str
    target_tokens: int
    attempt: str  # the attempt, marked when it met its shape first
    cells: list[NeedleCell | None]  # one per depth, None where that depth was not tried


@dataclass(frozen=True)
class NeedleTable:
    depths: list[float]
    rows: list[NeedleRow]


def needle_table(engine: EngineSummary) -> NeedleTable:
    """One row per (scenario, length, attempt), one column per needle depth."""
    needles = engine.long_context + engine.boundary.needles
    depths = sorted({n.depth for n in needles})
    keys: list[tuple[str, int, int]] = []
    for n in needles:
        if (n.scenario, n.target_tokens, n.attempt) not in keys:
            keys.append((n.scenario, n.target_tokens, n.attempt))
    rows = []
    for scenario, target, attempt in keys:
        group = {n.depth: n for n in needles if (n.scenario, n.target_tokens, n.attempt) == (scenario, target, attempt)}
        first = any(n.first_encounter for n in group.values())
        cells = [None if d not in group else NeedleCell(group[d], _needle_detail(group[d])) for d in depths]
        rows.append(NeedleRow(scenario, target, f"{attempt}" + (" (first shape)" if first else ""), cells))
    return NeedleTable(depths, rows)


def _needle_detail(n: Needle) -> str:
    return f"answer {n.answer!r}" if n.status == "ok" else f"{n.status}: {n.error or ''}"


def answered_none(engines: dict[str, EngineSummary]) -> list[tuple[str, int]] | None:
    """(engine, items asked) for each engine that ran the answers step, when none of them answered any item
    right: nothing tells the engines apart on answers then, so the report says so instead of comparing them.
    None when some engine answered an item right, or none ran the step."""
    asked = {n: sum(a.items for a in e.quality.families.values()) for n, e in engines.items() if e.quality}
    if not sum(asked.values()) or any(a.correct for e in engines.values() if e.quality
                                      for a in e.quality.families.values()):
        return None
    return list(asked.items())


def check_matrix(engines: dict[str, EngineSummary]) -> tuple[list[str], list[str]]:
    """(engines that ran checks, every check any of them ran), in run order."""
    names = [n for n, e in engines.items() if e.check_evidence]
    checks: list[str] = []
    for n in names:
        checks += [c for c in engines[n].check_evidence if c not in checks]
    return names, checks
