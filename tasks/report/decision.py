"""The decision summary: a few sentences written from the summary's figures, never by hand.

Which engine leads where (a lead needs a gap above LEAD_MARGIN; a gap resting on a figure whose
rounds spread more than 25% of its median is called uncertain), what is unreliable and why, what
was not tested, and the regressions against the baseline when the nightly comparison wrote any.
"""

from __future__ import annotations

from typing import Any

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


def decide(summary: dict[str, Any]) -> list[dict[str, str]]:
    """[{topic, text}] with topic one of leads, reliability, not_tested, regressions."""
    engines = summary.get("engines") or {}
    out: list[dict[str, str]] = []
    if summary.get("dry_run"):
        out.append({"topic": "not_tested", "text": "Dry run: manifests were rendered, nothing was deployed or "
                                                   "measured."})
    out += [{"topic": "leads", "text": t} for t in _leads(engines)]
    out += [{"topic": "reliability", "text": t} for t in _reliability(summary)]
    out += [{"topic": "not_tested", "text": t} for t in _not_tested(summary)]
    out += [{"topic": "regressions", "text": t} for t in _regressions(summary.get("regressions") or [])]
    return out


# ---- leads ---------------------------------------------------------------------------------------


def compare(values: dict[str, dict[str, Any] | None], higher_is_better: bool) -> dict[str, Any] | None:
    """Leader among engines' figures ({median, spread}); None with fewer than two published values.

    Returns {leader, runner_up, gap (fraction of the runner-up), on_par, uncertain}.
    """
    have = {name: f for name, f in values.items() if f and f.get("median") is not None}
    if len(have) < 2:
        return None
    ranked = sorted(have.items(), key=lambda kv: kv[1]["median"], reverse=higher_is_better)
    (leader, best), (runner_up, second) = ranked[0], ranked[1]
    base = abs(second["median"]) or 1e-12
    gap = abs(best["median"] - second["median"]) / base
    return {
        "leader": leader,
        "runner_up": runner_up,
        "best": best["median"],
        "second": second["median"],
        "gap": gap,
        "on_par": gap <= LEAD_MARGIN,
        "uncertain": bool(best.get("spread") or second.get("spread")),
    }


def level_figures(engines: dict[str, Any], scenario: str, figure: str) -> dict[str, dict[str, dict[str, Any] | None]]:
    """{level label: {engine: figure}} for one scenario's figure, levels in run order."""
    out: dict[str, dict[str, dict[str, Any] | None]] = {}
    for name, e in engines.items():
        for level in ((e.get("perf") or {}).get(scenario) or {}).get("levels", []):
            out.setdefault(level["label"], {})[name] = (level.get("figures") or {}).get(figure)
    return out


def _leads(engines: dict[str, Any]) -> list[str]:
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


def _single_engine(engines: dict[str, Any]) -> str:
    name, e = next(iter(engines.items()))
    if not e.get("ready"):
        return f"One engine ({name}), which never became ready: nothing was measured."
    checks = [o for o in (e.get("checks") or {}).values() if o != "not_applicable"]
    text = (f"One engine ({name}), so no comparison: {checks.count('pass')}/{len(checks)} functional checks "
            f"passed, needles {e['needles']['passed']}/{e['needles']['total']}")
    peak = max(((lv["figures"].get("output_tps") or {}).get("median") or 0, lv["label"])
               for lv in ((e.get("perf") or {}).get("short") or {}).get("levels", [{"figures": {}, "label": ""}]))
    if peak[0]:
        text += f", peak short output {_num(peak[0])} tokens/s at {peak[1]}"
    return text + "."


def _evidence_leads(engines: dict[str, Any]) -> list[str]:
    lines = []
    checks = []
    for name, e in engines.items():
        outcomes = e.get("checks") or {}
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
        rows = e.get("long_context") or []
        if not rows:
            continue
        failed = [f"{r['target_tokens']} tokens at {r['depth']:.0%}" for r in rows if not r["passed"]]
        longest = max((r["target_tokens"] for r in rows if r["passed"]), default=None)
        text = f"{name} {sum(r['passed'] for r in rows)}/{len(rows)}"
        text += f", longest retrieved {longest} tokens" if longest else ""
        needles.append(text + (f" (missed: {', '.join(failed[:4])})" if failed else ""))
    if needles:
        lines.append("Long-context needles (exact string back): " + "; ".join(needles) + ".")
    cache = []
    for name, e in engines.items():
        pc = e.get("prefix_cache")
        if pc:
            hit = pc.get("hit_rate")
            cache.append(f"{name} {pc.get('verdict')}" + (f" (server hit rate {hit:.0%})" if hit is not None else ""))
    if cache:
        lines.append("Prefix cache: " + "; ".join(cache) + ".")
    warnings = []
    for name, e in engines.items():
        found = sorted({f["finding"] for f in e.get("startup_findings") or [] if f.get("severity") != "info"})
        if found:
            warnings.append(f"{name}: {', '.join(found)}")
    if warnings:
        lines.append("Startup warnings that cap performance: " + "; ".join(warnings) + ".")
    return lines


# ---- reliability -----------------------------------------------------------------------------------


def _reliability(summary: dict[str, Any]) -> list[str]:
    engines = summary.get("engines") or {}
    lines = []
    validation = summary.get("validation") or {}
    if validation.get("ran") and not validation.get("success"):
        lines.append("The result tables failed validation (" + ", ".join(validation.get("failed_tables") or [])
                     + "): the run is quarantined and never a regression baseline.")
    elif not validation.get("ran"):
        lines.append("Validation did not run: these tables are unchecked.")
    for name, e in engines.items():
        if e.get("ready") and not (e.get("ttft") or {}).get("reliable"):
            lines.append(f"{name}: {e['ttft'].get('reason')}. TPOT and ITL are withheld with it; "
                         "throughput and E2E stand.")
    worst = _worst_first_encounter(engines)
    if worst:
        lines.append(worst)
    spread = [f"{name} {scen} {level['label']} {fig}"
              for name, e in engines.items()
              for scen, p in (e.get("perf") or {}).items()
              for level in p["levels"]
              for fig, f in level["figures"].items()
              if f.get("spread") and fig in ("output_tps", "ttft_p95_s", "e2e_p95_s", "tpot_p50_s")]
    if spread:
        lines.append(f"{len(spread)} headline figure(s) spread more than 25% of their median over rounds "
                     f"(e.g. {', '.join(spread[:4])}): treat those medians as rough.")
    for name, e in engines.items():
        failed_rounds = sum(level["rounds_failed"] for p in (e.get("perf") or {}).values() for level in p["levels"])
        failed_requests = sum(level["requests_failed"] for p in (e.get("perf") or {}).values() for level in p["levels"])
        deviations = sum(level["length_deviations"] for p in (e.get("perf") or {}).values() for level in p["levels"])
        if failed_rounds or failed_requests or deviations:
            lines.append(f"{name}: {failed_rounds} failed round(s), {failed_requests} failed request(s), "
                         f"{deviations} request(s) whose usage differs from the requested lengths.")
        pc = e.get("prefix_cache")
        if pc and pc.get("verdict") != "effective":
            lines.append(f"{name} prefix cache {pc.get('verdict')}: {pc.get('reason')}.")
    return lines


def _worst_first_encounter(engines: dict[str, Any]) -> str | None:
    """The largest first-encounter P99 against its steady median: the JIT tail a median view hides.

    Always named when any shape was met for the first time in this run (the seed's lesson: look
    at the first round of a new shape separately); advice follows when it is 1.5x or more.
    """
    worst = None
    for name, e in engines.items():
        metric = "ttft_p99_s" if (e.get("ttft") or {}).get("reliable") else "e2e_p99_s"
        for scen, p in (e.get("perf") or {}).items():
            for level in p["levels"]:
                first = level.get("first_encounter") or {}
                med = ((level.get("figures") or {}).get(metric) or {}).get("median")
                if first.get(metric) and med:
                    ratio = first[metric] / med
                    if worst is None or ratio > worst[0]:
                        worst = (ratio, name, scen, level["label"], metric, first[metric], med,
                                 first.get("source") or "its first round")
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


def _not_tested(summary: dict[str, Any]) -> list[str]:
    items = summary.get("not_tested") or []
    if not items:
        return ["Every enabled scenario and check ran on every engine."]
    by_what: dict[str, list[str]] = {}
    for item in items:
        by_what.setdefault(f"{item['what']} ({item['why']})", []).append(item["engine"])
    return [f"Not tested: {what} for {', '.join(engines)}." for what, engines in by_what.items()]


def _regressions(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    bad = [r for r in rows if r.get("regressed")]
    baseline = sorted({str(r.get("baseline_run_id")) for r in rows if r.get("baseline_run_id")})
    against = f" against {', '.join(baseline)}" if baseline else ""
    if not bad:
        return [f"No regression{against} ({len(rows)} comparisons)."]
    listed = "; ".join(
        f"{r['engine']} {r['scenario']}{'' if r.get('concurrency') is None else ' c=' + str(r['concurrency'])} "
        f"{r['metric']} {_change(r.get('change'))}" for r in bad[:5]
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
