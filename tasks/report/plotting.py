"""What every chart of the report shares: the Agg figure and its PNG bytes, the engines' colours, the
axes' style, and a median bar with its round values as dots (PROTOCOL.md section 5: every median shows
its rounds). matplotlib is imported inside the functions: the DAG parses this package."""

from __future__ import annotations

import io
from typing import Any

from tasks.report.schema import RunSummary
from tasks.report.schema.perf import Figure

DPI = 100
SPREAD_COLOR = "#d32f2f"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


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


def legend(ax: Any, **kwargs: Any) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        seen: dict[str, Any] = {}
        for h, lab in zip(handles, labels):
            seen.setdefault(lab, h)
        ax.legend(list(seen.values()), list(seen.keys()), fontsize=7, frameon=False, **kwargs)


def round_dot_legend(ax: Any) -> None:
    ax.scatter([], [], s=9, color="black", label="round values")
