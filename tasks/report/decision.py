"""The decision summary: a few sentences written from the summary's figures, never by hand.

Which engine leads where (a lead needs a gap above LEAD_MARGIN; a gap resting on a figure whose
rounds spread more than 25% of its median is called uncertain), what is unreliable and why, what
was not tested, and the regressions against the baseline when the nightly comparison wrote any.
"""

from __future__ import annotations

from typing import Any

from tasks.report.schema import DecisionLine, EngineSummary, Figure, Regression, RunSummary

LEAD_MARGIN = 0.05  # closer than 5% is "on par": three rounds cannot separate it

# (scenario, figure, higher is better, words)
LEAD_FIGURES = (
    ("short", "output_tps", True, "output throughput"),
    ("short", "ttft_p95_s", False, "P95 TTFT"),
    ("prefill", "output_tps", True, "output throughput"),
    ("prefill", "ttft_p95_s", False, "P95 TTFT"),
    ("decode", "output_tps", True, "output throughput"),
    ("decode", "tpot_p50_s", False, "P50 TPOT"),
    ("rate", "goodput_rps", True, "goodput"),
)


def decide(summary: RunSummary) -> list[DecisionLine]:
    """The decision summary's lines, each under one topic: leads, reliability, not_tested, regressions."""
    out: list[DecisionLine] = []
    if summary.dry_run:
        out.append(DecisionLine(topic="not_tested",
                                text="Dry run: manifests were rendered, nothing was deployed or measured."))
    out += [DecisionLine(topic="leads", text=t) for t in _leads(summary.engines)]
    out += [DecisionLine(topic="reliability", text=t) for t in _reliability(summary)]
    out += [DecisionLine(topic="not_tested", text=t) for t in _not_tested(summary)]
    out += [DecisionLine(topic="regressions", text=t) for t in _regressions(summary.regressions)]
    return out


# ---- leads ---------------------------------------------------------------------------------------


def compare(values: dict[str, Figure | None], higher_is_better: bool) -> dict[str, Any] | None:
    """Leader among engines' figures; None with fewer than two published values.

    Returns {leader, runner_up, best, second, gap (fraction of the runner-up), on_par, uncertain}.
    """
    have = {name: (f.median, f.spread) for name, f in values.items() if f is not None and f.median is not None}
    if len(have) < 2:
        return None
    ranked = sorted(have.items(), key=lambda kv: kv[1][0], reverse=higher_is_better)
    (leader, (best, best_spread)), (runner_up, (second, second_spread)) = ranked[0], ranked[1]
    gap = abs(best - second) / (abs(second) or 1e-12)
    return {
        "leader": leader,
        "runner_up": runner_up,
        "best": best,
        "second": second,
        "gap": gap,
        "on_par": gap <= LEAD_MARGIN,
        "uncertain": best_spread or second_spread,
    }


def level_figures(engines: dict[str, EngineSummary], scenario: str, figure: str) -> dict[str, dict[str, Figure | None]]:
    """{level label: {engine: figure}} for one scenario's figure, levels in run order."""
    out: dict[str, dict[str, Figure | None]] = {}
    for name, e in engines.items():
        for level in e.levels(scenario):
            out.setdefault(level.label, {})[name] = level.figures.get(figure)
    return out


def _leads(engines: dict[str, EngineSummary]) -> list[str]:
    if len(engines) < 2:
        return [_single_engine(engines)] if engines else []
    lines = []
    for scenario, figure, higher, words in LEAD_FIGURES:
        parts, leaders = [], set()
        for label, values in level_figures(engines, scenario, figure).items():
            c = compare(values, higher)
            if c is None:
                continue
            if c["on_par"]:
                parts.append(f"on par at {label} (within {_pct(c['gap'])})")
                continue
            leaders.add(c["leader"])
            better = "higher" if higher else "lower"
            note = "; uncertain: round spread >25%" if c["uncertain"] else ""
            parts.append(f"{c['leader']} leads at {label} ({_num(c['best'])} vs {_num(c['second'])}, "
                         f"{c['gap']:.0%} {better}{note})")
        if parts:
            lines.append(f"{scenario} {words}: " + "; ".join(parts) + ".")
    lines += _evidence_leads(engines)
    return lines


def _single_engine(engines: dict[str, EngineSummary]) -> str:
    name, e = next(iter(engines.items()))
    if not e.ready:
        return f"One engine ({name}), which never became ready: nothing was measured."
    checks = [o for o in e.checks.values() if o != "not_applicable"]
    text = (f"One engine ({name}), so no comparison: {checks.count('pass')}/{len(checks)} functional checks "
            f"passed, needles {e.needles.passed}/{e.needles.total}")
    peak = max(((lv.median("output_tps") or 0, lv.label) for lv in e.levels("short")), default=(0, ""))
    if peak[0]:
        text += f", peak short output {_num(peak[0])} tokens/s at {peak[1]}"
    return text + "."


def _evidence_leads(engines: dict[str, EngineSummary]) -> list[str]:
    lines = []
    checks = []
    for name, e in engines.items():
        outcomes = e.checks
        if not outcomes:
            continue
        failed = sorted(c for c, o in outcomes.items() if o == "fail")
        applicable = [o for o in outcomes.values() if o != "not_applicable"]
        text = f"{name} {applicable.count('pass')}/{len(applicable)}"
        checks.append(text + (f" (failed: {', '.join(failed)})" if failed else ""))
    if checks:
        lines.append("Functional checks passed: " + "; ".join(checks) + ".")
    needles = []
    for name, e in engines.items():
        rows = e.long_context
        if not rows:
            continue
        failed = [f"{r.target_tokens} tokens at {r.depth:.0%}" for r in rows if not r.passed]
        longest = max((r.target_tokens for r in rows if r.passed), default=None)
        text = f"{name} {sum(r.passed for r in rows)}/{len(rows)}"
        text += f", longest retrieved {longest} tokens" if longest else ""
        needles.append(text + (f" (missed: {', '.join(failed[:4])})" if failed else ""))
    if needles:
        lines.append("Long-context needles (exact string back): " + "; ".join(needles) + ".")
    cache = []
    for name, e in engines.items():
        pc = e.prefix_cache
        if pc is not None:
            hit = pc.hit_rate
            cache.append(f"{name} {pc.verdict}" + (f" (server hit rate {hit:.0%})" if hit is not None else ""))
    if cache:
        lines.append("Prefix cache: " + "; ".join(cache) + ".")
    warnings = []
    for name, e in engines.items():
        found = sorted({str(f.finding) for f in e.startup_findings if f.severity != "info"})
        if found:
            warnings.append(f"{name}: {', '.join(found)}")
    if warnings:
        lines.append("Startup warnings that cap performance: " + "; ".join(warnings) + ".")
    return lines


# ---- reliability -----------------------------------------------------------------------------------


def _reliability(summary: RunSummary) -> list[str]:
    engines = summary.engines
    lines = []
    validation = summary.validation
    if validation.ran and not validation.success:
        lines.append("The result tables failed validation (" + ", ".join(validation.failed_tables)
                     + "): the run is quarantined and never a regression baseline.")
    elif not validation.ran:
        lines.append("Validation did not run: these tables are unchecked.")
    for name, e in engines.items():
        if e.ready and not e.ttft_published:
            lines.append(f"{name}: {e.ttft.reason}. TPOT and ITL are withheld with it; "
                         "throughput and E2E stand.")
    worst = _worst_first_encounter(engines)
    if worst:
        lines.append(worst)
    spread = [f"{name} {scen} {level.label} {fig}"
              for name, e in engines.items()
              for scen, p in e.perf.items()
              for level in p.levels
              for fig, f in level.figures.items()
              if f.spread and fig in ("output_tps", "ttft_p95_s", "e2e_p95_s", "tpot_p50_s")]
    if spread:
        lines.append(f"{len(spread)} headline figure(s) spread more than 25% of their median over rounds "
                     f"(e.g. {', '.join(spread[:4])}): treat those medians as rough.")
    for name, e in engines.items():
        levels = [level for p in e.perf.values() for level in p.levels]
        failed_rounds = sum(level.rounds_failed for level in levels)
        failed_requests = sum(level.requests_failed for level in levels)
        deviations = sum(level.length_deviations for level in levels)
        if failed_rounds or failed_requests or deviations:
            lines.append(f"{name}: {failed_rounds} failed round(s), {failed_requests} failed request(s), "
                         f"{deviations} request(s) whose usage differs from the requested lengths.")
        pc = e.prefix_cache
        if pc is not None and pc.verdict != "effective":
            lines.append(f"{name} prefix cache {pc.verdict}: {pc.reason}.")
    return lines


def _worst_first_encounter(engines: dict[str, EngineSummary]) -> str | None:
    """The largest first-encounter P99 against its steady median: the JIT tail a median view hides.

    Always named when any shape was met for the first time in this run (the seed's lesson: look
    at the first round of a new shape separately); advice follows when it is 1.5x or more.
    """
    worst = None
    for name, e in engines.items():
        metric = "ttft_p99_s" if e.ttft_published else "e2e_p99_s"
        for scen, p in e.perf.items():
            for level in p.levels:
                first = level.first_encounter
                tail = None if first is None else first.figure(metric)
                med = level.median(metric)
                if first is not None and tail and med:
                    ratio = tail / med
                    if worst is None or ratio > worst[0]:
                        worst = (ratio, name, scen, level.label, metric, tail, med,
                                 first.source or "its first round")
    if worst is None:
        return None
    ratio, name, scen, label, metric, first, med, source = worst
    words = "P99 TTFT" if metric == "ttft_p99_s" else "P99 E2E"
    text = (f"Worst first encounter: {name} {scen} {label} had {words} {_num(first)} s in {source}, the first "
            f"round of that shape on a fresh server, against a steady median of {_num(med)} s ({ratio:.1f}x)")
    if ratio >= 1.5:
        return text + "; warm up every production shape before serving."
    return text + "."


# ---- not tested, regressions ---------------------------------------------------------------------


def _not_tested(summary: RunSummary) -> list[str]:
    if not summary.not_tested:
        return ["Every enabled scenario and check ran on every engine."]
    by_what: dict[str, list[str]] = {}
    for item in summary.not_tested:
        by_what.setdefault(f"{item.what} ({item.why})", []).append(item.engine)
    return [f"Not tested: {what} for {', '.join(engines)}." for what, engines in by_what.items()]


def _regressions(rows: list[Regression]) -> list[str]:
    if not rows:
        return []
    bad = [r for r in rows if r.regressed]
    baseline = sorted({r.baseline_run_id for r in rows if r.baseline_run_id})
    against = f" against {', '.join(baseline)}" if baseline else ""
    if not bad:
        return [f"No regression{against} ({len(rows)} comparisons)."]
    listed = "; ".join(
        f"{r.engine} {r.scenario}{'' if r.concurrency is None else ' c=' + str(r.concurrency)} "
        f"{r.metric} {_change(r.change)}" for r in bad[:5]
    )
    return [f"{len(bad)} regression(s){against}: {listed}."]


def _pct(fraction: float) -> str:
    return f"{fraction:.1%}" if fraction < 0.1 else f"{fraction:.0%}"


def _change(change: Any) -> str:
    return "" if change is None else f"{change:+.1%}"


def _num(v: float | None) -> str:
    if v is None:
        return "n/a"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"
