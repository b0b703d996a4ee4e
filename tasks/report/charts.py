"""The report's charts, drawn from the run's summary (a RunSummary) alone, as PNG bytes.

Every bar or point that carries a median also shows its round values (small dots) and a red
"spread" mark when they spread more than 25% of the median. The first-encounter round's P95/P99
sits beside the medians. A chart draws what its data can show: a line joins load levels only where an
engine has two or more (one level: each engine's point with its interval), and a log axis carries
points with whiskers, never bars (a bar's length means nothing on it). An engine whose TTFT is not published never appears on a TTFT axis: it
gets an E2E panel instead, with the reason in its title. A forest plot per scenario shows each
engine against the base engine: the ratio and its confidence interval, with the line at 1.

matplotlib is imported inside the functions (object API with the Agg canvas, no pyplot state):
the DAG parses this package and should not pay for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tasks.stats.figures import median
from tasks.report.decision import LEAD_WORDS
from tasks.report.schema import RunSummary
from tasks.report.schema.comparison import Comparison
from tasks.report.schema.engine import EngineSummary
from tasks.report.schema.perf import PerfLevel
from tasks.stats.reliability import WITHHELD
from tasks.report.frontier import frontier_chart
from tasks.report.plotting import (bar_with_rounds, empty_axes, engine_colors, legend, mean_with_interval,
                                   median_with_range, new_figure, one_level, png_bytes, round_dot_legend,
                                   round_values, spread_mark, style_axes)

PASS_COLOR, FAIL_COLOR = "#2e7d32", "#c62828"
# Ratio ticks: fine for narrow intervals, coarse when an interval spans more than a factor of 3
FINE_RATIO_TICKS = (0.5, 0.67, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2)
COARSE_RATIO_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
VERDICT_COLORS = {"better": PASS_COLOR, "worse": FAIL_COLOR}  # otherwise grey: no verdict


def render_charts(summary: RunSummary) -> dict[str, bytes]:
    """{chart name: PNG bytes} for every chart the run has data for."""
    makers: dict[str, Callable[[RunSummary], bytes | None]] = {
        "throughput": throughput_chart,
        "frontier": frontier_chart,
        "ttft": ttft_chart,
        "decode_prefill": decode_prefill_chart,
        "long_context": long_context_chart,
        "prefix_cache": prefix_cache_chart,
        "capacity": capacity_chart,
        "telemetry": telemetry_chart,
    }
    out = {}
    for name, make in makers.items():
        png = make(summary)
        if png:
            out[name] = png
    for scenario in dict.fromkeys(c.scenario for c in summary.comparisons):
        out[f"effects_{scenario}"] = forest_chart(summary, scenario)
    return out


# ---- charts ----------------------------------------------------------------------------------------


THROUGHPUT_PANELS = (("output_tps", "output tokens/s"), ("request_tps", "requests/s"))


def throughput_chart(summary: RunSummary) -> bytes | None:
    """Output tokens/s against concurrency (short scenario), per engine: median line, round dots. Where no
    engine measured two levels there is nothing to join: each engine's point with its interval instead."""
    engines = summary.engines
    if not any(e.levels("short") for e in engines.values()):
        return None
    if one_level(engines, "short"):
        return one_level_throughput_chart(summary)
    colors = engine_colors(summary)
    fig, axes = new_figure(11, 4.0, ncols=2)
    for ax, (figure_name, ylabel) in zip(axes[0], THROUGHPUT_PANELS):
        ticks: set[int] = set()
        for k, (name, e) in enumerate(engines.items()):
            levels = [lv for lv in e.levels("short") if lv.median(figure_name) and lv.concurrency is not None]
            if not levels:
                continue
            shift = 1 + 0.04 * (k - (len(engines) - 1) / 2)  # side by side on a log axis
            xs = [lv.concurrency * shift for lv in levels]
            meds = [lv.median(figure_name) for lv in levels]
            ax.plot(xs, meds, "-o", color=colors[name], label=f"{name} (median)", markersize=5)
            for x, lv in zip(xs, levels):
                f = lv.figures[figure_name]
                values = f.rounds
                firsts = set(lv.first_encounter_rounds)
                for rnd, v in zip(lv.rounds, values):
                    if v is None:
                        continue
                    marker = "^" if rnd in firsts else "o"
                    ax.scatter([x], [v], s=16, marker=marker, facecolors="none", edgecolors=colors[name], zorder=3)
                if f.spread and f.median is not None:
                    spread_mark(ax, x, max([f.median, *[v for v in values if v is not None]]))
                ticks.add(lv.concurrency)
        ax.scatter([], [], s=16, marker="o", facecolors="none", edgecolors="gray", label="round values")
        ax.scatter([], [], s=16, marker="^", facecolors="none", edgecolors="gray", label="first-encounter round")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(ticks), [str(t) for t in sorted(ticks)])
        ax.minorticks_off()
        ax.set_xlabel("concurrency", fontsize=9)
        style_axes(ax, f"short scenario: {ylabel} vs concurrency", ylabel)
        ax.set_ylim(bottom=0)
        legend(ax, loc="best")
    return png_bytes(fig)


def one_level_throughput_chart(summary: RunSummary) -> bytes:
    """The short scenario at one level per engine: each engine's output tokens/s and requests/s as the
    geometric mean of its rounds with its interval, the rounds beside it. No line: one level has no trend."""
    colors = engine_colors(summary)
    shown = {n: e.levels("short")[0] for n, e in summary.engines.items() if e.levels("short")}
    labels = one_level(summary.engines, "short") or []
    at = f" at {labels[0]}" if len(labels) == 1 else ""
    fig, axes = new_figure(11, 3.8, ncols=2)
    for ax, (figure_name, ylabel) in zip(axes[0], THROUGHPUT_PANELS):
        for i, (name, lv) in enumerate(shown.items()):
            firsts = tuple(r in lv.first_encounter_rounds for r in lv.rounds)
            mean_with_interval(ax, i, lv.figures.get(figure_name), colors[name], summary.confidence,
                               first_rounds=firsts)
        ax.scatter([], [], s=16, marker="o", facecolors="none", edgecolors="gray", label="round values")
        ax.scatter([], [], s=16, marker="^", facecolors="none", edgecolors="gray", label="first-encounter round")
        ax.errorbar([], [], yerr=[], fmt="o", color="gray", capsize=5,
                    label=f"geometric mean, {summary.confidence:.0%} interval")
        ax.set_xticks(range(len(shown)), [n if at else f"{n}\n{lv.label}" for n, lv in shown.items()])
        ax.set_xlim(-0.6, len(shown) - 0.4)
        ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.15)
        style_axes(ax, f"short scenario{at}: {ylabel}", ylabel)
        legend(ax, loc="lower right")
    return png_bytes(fig)


def ttft_chart(summary: RunSummary) -> bytes | None:
    """Per engine: P50/P95/P99 as points at the median over rounds, each whisker spanning its rounds, on a log
    axis (first-encounter tails can be tens of times the steady figures); the first-encounter round's P95/P99
    as triangles beside them.

    An engine whose TTFT is not published shows the same for E2E, titled with the reason.
    """
    engines = {n: e for n, e in summary.engines.items() if e.levels("short")}
    if not engines:
        return None
    fig, axes = new_figure(11, 3.3 * len(engines), nrows=len(engines))
    shades = {"p50": "#90caf9", "p95": "#1e88e5", "p99": "#0d47a1"}
    for row, (name, e) in enumerate(engines.items()):
        ax = axes[row][0]
        metric = "ttft" if e.ttft_published else "e2e"
        levels = e.levels("short")
        step = 0.15
        drawn = [v for lv in levels for p in ("p50", "p95", "p99")
                 for v in round_values(lv.figures.get(f"{metric}_{p}_s")) if v > 0]
        ticks: list[tuple[float, str]] = []
        for i, lv in enumerate(levels):
            for j, p in enumerate(("p50", "p95", "p99")):
                median_with_range(ax, i + (j - 2) * step, lv.figures.get(f"{metric}_{p}_s"), shades[p])
                ticks.append((i + (j - 2) * step, p.upper()))
            first = lv.first_encounter
            for j, p in enumerate(("p95", "p99")):
                v = None if first is None else first.figure(f"{metric}_{p}_s")
                if v is not None:
                    ax.plot([i + (j + 1) * step], [v], "^", color="#ef6c00", alpha=0.5 if p == "p95" else 0.9,
                            markersize=8)
                    ticks.append((i + (j + 1) * step, f"first\n{p.upper()}"))
                    drawn.append(v)
        ax.errorbar([], [], yerr=[], fmt="o", color="gray", capsize=4, label="median of rounds, whisker: lowest "
                    "to highest round")
        ax.plot([], [], "^", color="#ef6c00", markersize=8, label="first-encounter round")
        round_dot_legend(ax)
        ax.set_xticks([x for x, _ in ticks], [t for _, t in ticks], fontsize=7)
        ax.set_xlim(-0.6, len(levels) - 0.4)
        by_level = ax.secondary_xaxis(-0.16)  # the load level under its marks
        by_level.set_xticks(range(len(levels)), [lv.label for lv in levels])
        by_level.tick_params(length=0, labelsize=9)
        by_level.spines["bottom"].set_visible(False)
        if drawn:  # a level whose rounds all failed draws nothing, and a log axis needs a value
            ax.set_yscale("log")  # first-encounter tails can be tens of times the steady figures
            ax.set_ylim(min(drawn) / 1.5, max(drawn) * 1.5)
            _seconds_axis(ax)
        where = f"at {levels[0].label}" if len(levels) == 1 else "by concurrency"
        if metric == "ttft":
            title = f"{name}: TTFT {where} (short)"
        else:
            title = f"{name}: E2E {where} (short)\nTTFT not published: {_short(e.ttft.reason, 110)}"
        style_axes(ax, title, f"{metric.upper()} (log scale)")
        legend(ax, loc="best")
    return png_bytes(fig)


def decode_prefill_chart(summary: RunSummary) -> bytes | None:
    """Decode: output tokens/s and P50 TPOT by concurrency. Prefill: output tokens/s and P95 TTFT."""
    engines = summary.engines
    if not any(e.levels("decode") or e.levels("prefill") for e in engines.values()):
        return None
    colors = engine_colors(summary)
    fig, axes = new_figure(11, 7.0, ncols=2, nrows=2)
    panels = (
        (axes[0][0], "decode", "output_tps", "decode: output tokens/s", "tokens/s", False),
        (axes[0][1], "decode", "tpot_p50_s", "decode: P50 TPOT", "seconds per token", True),
        (axes[1][0], "prefill", "output_tps", "prefill: output tokens/s", "tokens/s", False),
        (axes[1][1], "prefill", "ttft_p95_s", "prefill: P95 TTFT (first-encounter round hatched)", "seconds", True),
    )
    for ax, scenario, figure_name, title, ylabel, stream_timed in panels:
        shown = {n: e for n, e in engines.items() if e.levels(scenario) and (e.ttft_published or not stream_timed)}
        withheld = [n for n, e in engines.items() if e.levels(scenario) and stream_timed and not e.ttft_published]
        labels = sorted({lv.label for e in shown.values() for lv in e.levels(scenario)},
                        key=lambda s: float(s.split("=")[-1].split()[0]))
        if not labels:
            empty_axes(ax, f"{scenario}: not run" if not withheld else f"{scenario}: not published for "
                   f"{', '.join(withheld)} (TTFT unreliable)")
            style_axes(ax, title, ylabel)
            continue
        width = 0.8 / max(len(shown), 1)
        for k, (name, e) in enumerate(shown.items()):
            for lv in e.levels(scenario):
                x = labels.index(lv.label) + (k - (len(shown) - 1) / 2) * width
                f = lv.figures.get(figure_name)
                first = _first_encounter(lv, figure_name) if figure_name == "ttft_p95_s" else None
                bar_width = width / 2 if first is not None else width
                bar_with_rounds(ax, x - (bar_width / 2 if first is not None else 0), bar_width, f, colors[name],
                                  label=name)
                if first is not None:
                    ax.bar(x + bar_width / 2, first, bar_width, color=colors[name], alpha=0.3, hatch="//",
                           edgecolor=colors[name])
        round_dot_legend(ax)
        ax.set_xticks(range(len(labels)), labels)
        note = f"\n{', '.join(withheld)}: not published (TTFT unreliable)" if withheld else ""
        style_axes(ax, title + note, ylabel)
        legend(ax, loc="best")
    return png_bytes(fig)


def long_context_chart(summary: RunSummary) -> bytes | None:
    """Latency against prompt length with every needle: filled = retrieved, red x = missed.

    Left TTFT (engines whose TTFT is published), right E2E (every engine); hollow = first shape.
    """
    engines = {n: e for n, e in summary.engines.items() if e.long_context}
    if not engines:
        return None
    colors = engine_colors(summary)
    fig, axes = new_figure(11, 4.2, ncols=2)
    for ax, key, title in ((axes[0][0], "ttft_s", "long context: TTFT vs prompt length"),
                           (axes[0][1], "e2e_s", "long context: E2E vs prompt length")):
        drawn = False
        for name, e in engines.items():
            rows = [(r, getattr(r, key)) for r in e.long_context if getattr(r, key) is not None]
            if not rows:
                continue
            drawn = True
            lengths = sorted({r.target_tokens for r, _ in rows})
            meds = []
            for n in lengths:
                # The warmed attempt (the last one) is the headline; the first shape is drawn but not joined.
                last = max(r.attempt for r, _ in rows if r.target_tokens == n)
                meds.append(median(v for r, v in rows if r.target_tokens == n and r.attempt == last))
            ax.plot(lengths, meds, "-", color=colors[name], label=name, linewidth=1.5)
            for r, v in rows:
                if not r.passed:
                    ax.scatter([r.target_tokens], [v], marker="x", s=40, color=FAIL_COLOR, zorder=4)
                elif r.first_encounter:
                    ax.scatter([r.target_tokens], [v], s=28, facecolors="none", edgecolors=colors[name],
                               zorder=3)
                else:
                    ax.scatter([r.target_tokens], [v], s=18, color=colors[name], zorder=3)
        withheld = [n for n, e in engines.items() if key == "ttft_s" and not e.ttft_published]
        if not drawn:
            empty_axes(ax, "TTFT not published for " + ", ".join(withheld) if withheld else "no needle requests")
        else:
            ax.scatter([], [], s=18, color="gray", label="needle retrieved")
            ax.scatter([], [], s=28, facecolors="none", edgecolors="gray", label="needle retrieved, first shape")
            ax.scatter([], [], marker="x", s=40, color=FAIL_COLOR, label="needle missed")
            ax.set_xscale("log", base=2)
            ticks = sorted({r.target_tokens for e in engines.values() for r in e.long_context})
            ax.set_xticks(ticks, [_tokens(t) for t in ticks])
            ax.minorticks_off()
            ax.set_ylim(bottom=0)
            legend(ax, loc="best")
        ax.set_xlabel("prompt tokens", fontsize=9)
        note = f"\n{', '.join(withheld)}: not published (TTFT unreliable)" if withheld and drawn else ""
        style_axes(ax, title + note, "seconds")
    return png_bytes(fig)


def prefix_cache_chart(summary: RunSummary) -> bytes | None:
    """Cold request vs the repeats' median, with every repeat, and the server's hit rate over the trial."""
    engines = {n: e for n, e in summary.engines.items() if e.cache_trials}
    if not engines:
        return None
    colors = engine_colors(summary)
    fig, axes = new_figure(11, 4.0, ncols=2)
    for ax, key, words in ((axes[0][0], "ttft_s", "TTFT"), (axes[0][1], "e2e_s", "E2E")):
        names = [n for n, e in engines.items() if _trial_values(e, key, lambda trial: True)]
        if not names:
            empty_axes(ax, f"{words} not published (TTFT unreliable)")
            style_axes(ax, f"prefix cache: {words} cold vs repeats", "seconds")
            continue
        for i, name in enumerate(names):
            e = engines[name]
            cold = _trial_values(e, key, lambda trial: trial == 0)
            hot = sorted(_trial_values(e, key, lambda trial: trial > 0))
            if cold:
                ax.bar(i - 0.2, cold[0], 0.38, color=colors[name], alpha=0.45, label="cold (after a cache clear)")
            if hot:
                ax.bar(i + 0.2, median(hot), 0.38, color=colors[name], label="repeats (median)")
                ax.scatter([i + 0.2] * len(hot), hot, s=9, color="black", zorder=3)
            pc = e.prefix_cache
            hit = None if pc is None else pc.hit_rate
            text = f"hit rate {hit:.0%}" if hit is not None else "hit rate n/a"
            text += f"\n{'no verdict' if pc is None else pc.verdict}"
            top = max([*cold, *hot, 0.0])
            ax.annotate(text, (i, top), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=8,
                        color=PASS_COLOR if pc is not None and pc.verdict == "effective" else FAIL_COLOR)
        round_dot_legend(ax)
        ax.set_xticks(range(len(names)), names)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)
        withheld = [n for n in engines if n not in names]
        note = f"\n{', '.join(withheld)}: not published (TTFT unreliable)" if withheld else ""
        style_axes(ax, f"prefix cache: {words} cold vs repeats{note}", "seconds")
        legend(ax, loc="best")
    return png_bytes(fig)


def capacity_chart(summary: RunSummary) -> bytes | None:
    """Goodput share against load per engine: each probe with its interval and round shares, the
    target as a dashed line, each engine's capacity as a vertical line (none where not published)."""
    engines = {n: e.capacity for n, e in summary.engines.items() if e.capacity is not None and e.capacity.probes}
    if not engines:
        return None
    colors = engine_colors(summary)
    fig, axes = new_figure(11, 4.4)
    ax = axes[0][0]
    first = next(iter(engines.values()))
    unit = "concurrency" if first.mode == "concurrency" else "request rate (req/s)"
    loads = sorted({p.load for c in engines.values() for p in c.probes})
    for k, (name, cap) in enumerate(engines.items()):
        color = colors[name]
        shift = 1 + 0.03 * (k - (len(engines) - 1) / 2)  # side by side on a log axis
        probes = sorted(cap.probes, key=lambda p: p.load)
        shown = [p for p in probes if p.goodput_share is not None]
        ax.plot([p.load * shift for p in shown], [p.goodput_share for p in shown], "-", color=color, linewidth=1.2,
                label=name)
        for p in shown:
            x = p.load * shift
            if p.ci_low is not None and p.ci_high is not None:
                ax.plot([x, x], [p.ci_low, p.ci_high], "-", color=color, linewidth=3, alpha=0.3)
            style = {"facecolors": color} if p.verdict == "pass" else {"facecolors": "white"}
            ax.scatter([x], [p.goodput_share], s=42, marker="D" if p.close else "o", edgecolors=color, zorder=4,
                       **style)
            values = [v for v in p.round_shares if v is not None]
            ax.scatter([x] * len(values), values, s=8, color="black", zorder=3, linewidths=0)
        if cap.capacity is not None:
            ax.axvline(cap.capacity * shift, color=color, linestyle=":", linewidth=1.5)
            words = f"{'≥ ' if cap.outcome == 'at_least_max' else ''}{cap.capacity:g}"
            ax.annotate(f"{name}: capacity {words}", (cap.capacity * shift, 0.02 + 0.07 * k), xytext=(4, 0),
                        textcoords="offset points", fontsize=8, color=color, fontweight="bold")
    ax.axhline(first.target_goodput_share, color="black", linestyle="--", linewidth=1,
               label=f"target {first.target_goodput_share:.0%}")
    ax.scatter([], [], s=42, marker="o", color="gray", label="probe passed (filled) / failed (hollow)")
    ax.scatter([], [], s=42, marker="D", facecolors="white", edgecolors="gray", label="close: point estimate decided")
    ax.plot([], [], "-", color="gray", linewidth=3, alpha=0.3, label=f"{first.confidence:.0%} interval")
    ax.scatter([], [], s=8, color="black", label="round shares")
    ax.set_xscale("log", base=2)
    ax.set_xticks(loads, [f"{v:g}" for v in loads])
    ax.minorticks_off()
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel(unit, fontsize=9)
    withheld = [n for n, c in engines.items() if c.withheld]
    note = f"\n{', '.join(withheld)}: capacity not published (TTFT unreliable)" if withheld else ""
    style_axes(ax, f"capacity under SLO: goodput share vs {unit} ({first.input_tokens} in / {first.output_tokens} out)"
               + note, "share of requests within every SLO")
    legend(ax, loc="lower left")
    return png_bytes(fig)


def telemetry_chart(summary: RunSummary) -> bytes | None:
    """GPU power and utilization over the run per engine, from the DCGM readings of every measured
    round (gaps between rounds are left open), with each round's mean power as a short bar."""
    engines = {n: e.telemetry_rounds for n, e in summary.engines.items() if any(r.readings for r in e.telemetry_rounds)}
    if not engines:
        return None
    colors = engine_colors(summary)
    fig, axes = new_figure(11, 5.2, nrows=2)
    power_ax, util_ax = axes[0][0], axes[1][0]
    for name, rounds in engines.items():
        color = colors[name]
        for k, r in enumerate(rounds):
            pts = [p for p in r.readings if p[0] is not None]
            label = name if k == 0 else None
            power_ax.plot([p[0] for p in pts if p[2] is not None], [p[2] for p in pts if p[2] is not None], "-",
                          color=color, linewidth=1.1, label=label)
            util_ax.plot([p[0] for p in pts if p[1] is not None], [p[1] for p in pts if p[1] is not None], "-",
                         color=color, linewidth=1.1, label=label)
            if r.power_mean_w is not None and pts:
                power_ax.plot([pts[0][0], pts[-1][0]], [r.power_mean_w] * 2, "-", color=color, linewidth=4, alpha=0.25)
    power_ax.plot([], [], "-", color="gray", linewidth=4, alpha=0.25, label="round mean")
    style_axes(power_ax, "GPU power over the run (DCGM_FI_DEV_POWER_USAGE, summed over each engine's GPUs)", "W")
    style_axes(util_ax, "GPU utilization (DCGM_FI_DEV_GPU_UTIL, mean over each engine's GPUs)", "%")
    util_ax.set_ylim(-2, 102)
    util_ax.set_xlabel("seconds since the engine's first measured round", fontsize=9)
    legend(power_ax, loc="upper right")
    return png_bytes(fig)


def forest_chart(summary: RunSummary, scenario: str) -> bytes:
    """One row per (level, figure, engine vs base): the ratio with its interval, the line at 1."""
    rows = [c for c in summary.comparisons if c.scenario == scenario]
    fig, axes = new_figure(11, 1.2 + 0.38 * len(rows))
    ax = axes[0][0]
    for y, c in enumerate(rows):
        color = VERDICT_COLORS.get(c.verdict, "#757575")
        text = c.verdict  # not enough rounds: no interval to draw
        if c.ratio is not None and c.low is not None and c.high is not None:
            ax.plot([c.low, c.high], [y, y], "-", color=color, linewidth=2)
            ax.plot([c.ratio], [y], "o", color=color, markersize=6)
            text = f"{c.interval()} {c.verdict}"
        ax.annotate(text, (1, y), xycoords=("axes fraction", "data"), xytext=(6, 0), textcoords="offset points",
                    va="center", fontsize=8, color=color)
    ax.axvline(1, color="black", linewidth=1)
    ax.set_xscale("log")  # a ratio of 2 and one of 1/2 are the same distance from 1
    _ratio_axis(ax, rows)
    ax.set_yticks(range(len(rows)), [_forest_label(c) for c in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first row on top
    base = rows[0].base if rows else ""
    style_axes(ax, f"{scenario}: each engine against {base} ({summary.confidence:.0%} CI of the ratio)", "")
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel(f"ratio engine / {base} (log scale)", fontsize=9)
    return png_bytes(fig)


def _forest_label(c: Comparison) -> str:
    return f"{c.level} {LEAD_WORDS.get((c.scenario, c.figure), c.figure)}: {c.engine} vs {c.base}"


def _ratio_axis(ax: Any, rows: list[Comparison]) -> None:
    """Limits that hold every interval and 1; ticks at plain ratios (0.9, 1, 1.25), never 10^0."""
    ends = [v for c in rows for v in (c.low, c.high) if v is not None] + [1.0]
    low, high = min(ends) / 1.05, max(ends) * 1.05
    ax.set_xlim(low, high)
    ticks = [t for t in (FINE_RATIO_TICKS if high / low <= 3 else COARSE_RATIO_TICKS) if low <= t <= high]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()


def _seconds_axis(ax: Any) -> None:
    """Tick labels in ms or s, never 4x10^-1."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=()))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v * 1000:g} ms" if v < 1 else f"{v:g} s"))


def _first_encounter(level: PerfLevel, figure: str) -> float | None:
    return None if level.first_encounter is None else level.first_encounter.figure(figure)


def _trial_values(engine: EngineSummary, key: str, keep: Callable[[int], bool]) -> list[float]:
    """The cache trials' `key` (ttft_s or e2e_s) where published, of the trials `keep` selects."""
    values = ((t.trial, getattr(t, key)) for t in engine.cache_trials)
    return [v for trial, v in values if keep(trial) and v is not None]


def _tokens(n: int) -> str:
    return f"{round(n / 1024)}K" if n >= 1024 else str(n)


def _short(text: Any, limit: int = 70) -> str:
    s = str(text or "").removeprefix(WITHHELD)
    return s if len(s) <= limit else s[: limit - 1] + "…"


__all__ = ["render_charts", "throughput_chart", "one_level_throughput_chart", "ttft_chart", "decode_prefill_chart", "long_context_chart",
           "prefix_cache_chart", "capacity_chart", "telemetry_chart", "forest_chart"]
