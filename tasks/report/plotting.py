"""What every chart of the report shares: the Agg figure and its PNG bytes, the engines' colours, the
axes' style, and the marks that carry a figure with its rounds (PROTOCOL.md section 5: every median shows
its rounds): a median bar on a linear axis, a median point whose whisker spans the rounds on a log axis (a
bar's length means nothing there), a geometric mean with its interval where a figure has one level only.
matplotlib is imported inside the functions: the DAG parses this package."""

from __future__ import annotations

import io
from typing import Any

from tasks.report.schema import RunSummary
from tasks.report.schema.perf import Figure
from tasks.stats.effects import level_interval

DPI = 100
SPREAD_COLOR = "#d32f2f"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def one_level(summary_engines: dict[str, Any], scenario: str) -> list[str] | None:
    """The levels measured when no engine measured two or more of `scenario` (there is no trend to draw a
    line through), in engine order; None where some engine has a sweep, or no engine measured it."""
    levels = [e.levels(scenario) for e in summary_engines.values()]
    if not any(levels) or any(len(lv) > 1 for lv in levels):
        return None
    return list(dict.fromkeys(lv[0].label for lv in levels if lv))


def new_figure(width: float, height: float, ncols: int = 1, nrows: int = 1) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def png_bytes(fig: Any) -> bytes:
    buf = io.BytesIO()
    # No Software/date metadata: the same summary gives the same bytes, so a retried archive write succeeds.
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def engine_colors(summary: RunSummary) -> dict[str, str]:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(summary.engines)}


def round_values(figure: Figure | None) -> list[float]:
    return [] if figure is None else [v for v in figure.rounds if v is not None]


def style_axes(ax: Any, title: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_ylabel(ylabel, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.tick_params(labelsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def empty_axes(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=9, color="#666", wrap=True, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def spread_mark(ax: Any, x: float, y: float) -> None:
    ax.annotate("spread", (x, y), xytext=(0, 7), textcoords="offset points", ha="center", fontsize=7,
                color=SPREAD_COLOR, fontweight="bold")


def bar_with_rounds(ax: Any, x: float, width: float, figure: Figure | None, color: str,
                      hatch: str | None = None, label: str | None = None) -> None:
    """One bar at the median, its round values as dots, the spread mark when flagged."""
    if figure is None or figure.median is None:
        return
    med = figure.median
    ax.bar(x, med, width, color=color, alpha=0.85 if not hatch else 0.35, hatch=hatch, edgecolor=color, label=label)
    values = round_values(figure)
    if values:
        ax.scatter([x] * len(values), values, s=9, color="black", zorder=3, linewidths=0)
    if figure.spread:
        spread_mark(ax, x, max([med, *values]))


def median_with_range(ax: Any, x: float, figure: Figure | None, color: str, label: str | None = None) -> None:
    """A point at the median, its whisker from the lowest round to the highest, the rounds as dots: for a log
    axis, where a bar's length would mean nothing."""
    if figure is None or figure.median is None:
        return
    values = round_values(figure)
    low, high = min([figure.median, *values]), max([figure.median, *values])
    ax.errorbar([x], [figure.median], yerr=[[figure.median - low], [high - figure.median]], fmt="o", color=color,
                markersize=7, capsize=4, elinewidth=1.5, label=label, zorder=2)
    if values:
        ax.scatter([x] * len(values), values, s=9, color="black", zorder=3, linewidths=0)
    if figure.spread:
        spread_mark(ax, x, high)


def mean_with_interval(ax: Any, x: float, figure: Figure | None, color: str, confidence: float,
                       label: str | None = None, first_rounds: tuple[bool, ...] = ()) -> None:
    """A figure of one level: the geometric mean of its rounds with its t-interval as a whisker (the effects'
    scale; tasks/stats/effects.py level_interval), the rounds as hollow marks beside it (triangles: a
    first-encounter round). Under two good rounds, the median alone."""
    if figure is None or figure.median is None:
        return
    found = level_interval(figure.rounds, confidence)
    if found is None:
        ax.plot([x], [figure.median], "o", color=color, markersize=7, label=label, zorder=2)
    else:
        mean, low, high = found
        ax.errorbar([x], [mean], yerr=[[mean - low], [high - mean]], fmt="o", color=color, markersize=7,
                    capsize=5, elinewidth=2, label=label, zorder=2)
    for k, v in enumerate(figure.rounds):
        if v is not None:
            first = k < len(first_rounds) and first_rounds[k]
            ax.scatter([x + 0.12], [v], s=16, marker="^" if first else "o", facecolors="none", edgecolors=color,
                       zorder=3)
    top = max([figure.median, *round_values(figure)] + ([found[2]] if found else []))
    if figure.spread:
        spread_mark(ax, x, top)


def legend(ax: Any, **kwargs: Any) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        seen: dict[str, Any] = {}
        for h, lab in zip(handles, labels):
            seen.setdefault(lab, h)
        ax.legend(list(seen.values()), list(seen.keys()), fontsize=7, frameon=False, **kwargs)


def round_dot_legend(ax: Any) -> None:
    ax.scatter([], [], s=9, color="black", label="round values")
