"""The throughput–latency frontier: per engine, across a scenario's load levels, what one user gets
(output tokens/s per user, 1/TPOT) against what the server delivers (output tokens/s in all, per GPU
where every engine's GPU count is known), each point with its interval over the level's steady rounds
(PROTOCOL.md, "The frontier").

Read from the summary's published figures alone, so the TTFT rule holds: an engine whose stream timing
is withheld has no TPOT and so no point, and the chart says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tasks.stats.effects import level_interval
from tasks.report.plotting import empty_axes, engine_colors, legend, new_figure, png_bytes, style_axes
from tasks.report.schema import RunSummary
from tasks.report.schema.engine import EngineSummary
from tasks.report.schema.perf import PerfLevel

TOTAL, PER_TOKEN = "output_tps", "tpot_p50_s"
# Interval = (geometric mean over rounds, low, high)
Interval = tuple[float, float, float]


@dataclass(frozen=True)
class FrontierPoint:
    level: str
    total_tps: Interval  # output tokens/s of the whole server (per GPU when `per_gpu`)
    per_user_tps: Interval  # output tokens/s one stream sees: 1 / TPOT
    per_gpu: bool


def frontier(summary: RunSummary, name: str, scenario: str) -> list[FrontierPoint]:
    """Engine `name`'s points over the scenario's levels: per GPU only where every engine's hardware record
    counts its GPUs (one engine per GPU beside another's whole server would compare apples with crates)."""
    gpus = _gpu_count(summary.engines[name]) if all(map(_gpu_count, summary.engines.values())) else None
    return level_points(summary.engines[name].levels(scenario), gpus, summary.confidence)


def _gpu_count(engine: EngineSummary) -> int | None:
    return engine.hardware.gpu_count if engine.hardware and engine.hardware.gpu_count else None


def level_points(levels: Sequence[PerfLevel], gpus: int | None, confidence: float) -> list[FrontierPoint]:
    """A point per level with two good steady rounds of both figures or more (a level whose TPOT the TTFT rule
    withholds has none): each round's output tokens/s (over `gpus` where given) and 1/TPOT. A first-encounter
    round pays its compilation and is left out, as the comparisons leave it out."""
    points = []
    for level in levels:
        total, tpot = level.figures.get(TOTAL), level.figures.get(PER_TOKEN)
        if total is None or tpot is None:
            continue
        steady = [r not in level.first_encounter_rounds for r in level.rounds]
        per_user = [None if v is None or v <= 0 or not s else 1.0 / v for v, s in zip(tpot.rounds, steady)]
        totals = [None if v is None or not s else v / (gpus or 1) for v, s in zip(total.rounds, steady)]
        t, u = level_interval(totals, confidence), level_interval(per_user, confidence)
        if t is not None and u is not None:
            points.append(FrontierPoint(level.label, t, u, gpus is not None))
    return points


def frontier_scenarios(summary: RunSummary) -> list[str]:
    """The scenarios some engine measured at two load levels or more, the traffic scenarios' levels (sessions,
    shared prefix, your own prompts) included: a frontier needs a sweep."""
    found = [s for e in summary.engines.values() for s in (*e.perf, *e.traffic_levels) if len(e.levels(s)) >= 2]
    return list(dict.fromkeys(found))


def frontier_chart(summary: RunSummary) -> bytes | None:
    """One panel per swept scenario, every engine on it, each point with its intervals on both axes."""
    scenarios = frontier_scenarios(summary)
    if not scenarios:
        return None
    colors = engine_colors(summary)
    fig, axes = new_figure(4.2 * len(scenarios), 3.4, ncols=len(scenarios))
    for ax, scenario in zip(axes[0], scenarios):
        drawn, withheld = False, []
        per_gpu = False
        for name, engine in summary.engines.items():
            points = frontier(summary, name, scenario)
            if not points:
                if engine.levels(scenario) and not engine.ttft_published:
                    withheld.append(name)
                continue
            drawn, per_gpu = True, per_gpu or points[0].per_gpu
            xs, ys = [p.total_tps[0] for p in points], [p.per_user_tps[0] for p in points]
            ax.errorbar(xs, ys, xerr=[[p.total_tps[0] - p.total_tps[1] for p in points],
                                      [p.total_tps[2] - p.total_tps[0] for p in points]],
                        yerr=[[p.per_user_tps[0] - p.per_user_tps[1] for p in points],
                              [p.per_user_tps[2] - p.per_user_tps[0] for p in points]],
                        color=colors[name], marker="o", markersize=4, capsize=2, linewidth=1, label=name)
            for p in points:
                ax.annotate(p.level, (p.total_tps[0], p.per_user_tps[0]), xytext=(4, 3),
                            textcoords="offset points", fontsize=7, color=colors[name])
        title = f"{scenario}: per user against in all"
        if withheld:
            title += f"\n(no TPOT published for {', '.join(withheld)}: TTFT rule)"
        style_axes(ax, title, "output tokens/s per user (1/TPOT)")
        ax.set_xlabel("output tokens/s" + (" per GPU" if per_gpu else " in all"), fontsize=9)
        if drawn:
            legend(ax)
        else:
            empty_axes(ax, "no level with two good rounds of TPOT and throughput")
    return png_bytes(fig)
