"""report.html: one self-contained page (inline CSS, charts as base64 PNG) drawn from summary.json.

Order follows a reader's questions: what should I choose (decision summary, engine comparison),
did anything regress, then the evidence behind each claim, then what was not tested.
"""

from __future__ import annotations

import base64
from html import escape
from typing import Any

from tasks.report.decision import compare

CSS = """
body{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;margin:24px auto;max-width:1180px;color:#222;
     font-size:14px;line-height:1.45;padding:0 16px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:2px solid #e0e0e0;
padding-bottom:3px}h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:12.5px}
td,th{border:1px solid #d9d9d9;padding:3px 7px;vertical-align:top;text-align:left}
th{background:#f3f4f6;font-weight:600}td.num{text-align:right;white-space:nowrap}
.meta td:first-child{font-weight:600;background:#fafafa}
.rounds{color:#666;font-size:11px}.spread{color:#c62828;font-weight:700;font-size:11px}
.pass{color:#1b5e20;background:#e8f5e9;font-weight:600}.fail{color:#b71c1c;background:#ffebee;font-weight:600}
.na{color:#555;background:#f1f1f1}.warn{color:#8d4b00;background:#fff4e0}
.badge{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px}
.evidence{color:#555;font-size:11px;font-family:"DejaVu Sans Mono",monospace;word-break:break-all}
.decision{background:#f7f9fc;border:1px solid #dbe4f0;border-radius:4px;padding:8px 16px}
.decision h3{margin:8px 0 2px}.decision ul{margin:2px 0 6px;padding-left:20px}
figure{margin:8px 0 14px}figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#555;font-size:12px}.note{color:#555;font-size:12.5px}
"""

TOPICS = (
    ("leads", "Which engine leads where"),
    ("reliability", "What is unreliable, and why"),
    ("regressions", "Regressions against the last good run"),
    ("not_tested", "What was not tested"),
)


def render_html(summary: dict[str, Any], charts: dict[str, bytes] | None = None) -> str:
    """The page for one run; `charts` defaults to drawing them from the summary."""
    if charts is None:
        from tasks.report.charts import render_charts

        charts = render_charts(summary)
    engines = summary.get("engines") or {}
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>DayOne report: {_e(summary.get('model'))} run {_e(summary.get('run_id'))}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>DayOne report: {_e(summary.get('model'))}</h1>",
        _contents(summary, charts),
        _run_meta(summary),
        _decision(summary),
        _comparison(engines),
    ]
    if summary.get("regressions"):
        parts.append(_regressions(summary["regressions"]))
    parts += [
        _section("Throughput vs concurrency", "throughput", charts,
                 "Short scenario. Lines join the medians over rounds; hollow marks are the round values, "
                 "triangles the first-encounter round. <b>spread</b>: the rounds spread more than 25% of the median.",
                 _perf_table(engines, "short", ("output_tps", "request_tps", "goodput_rps", "e2e_p50_s"))),
        _section("Time to first token", "ttft", charts,
                 "Short scenario. P50/P95/P99 are medians over rounds (dots: each round); the first-encounter "
                 "round's P95/P99 are hatched beside them. An engine whose TTFT is unreliable shows E2E instead.",
                 _latency_table(engines)),
        _section("Decode and prefill", "decode_prefill", charts,
                 "Decode: short input, long output. Prefill: long input, short output.",
                 _perf_table(engines, "decode", ("output_tps", "tpot_p50_s", "itl_p99_s", "e2e_p95_s"))
                 + _perf_table(engines, "prefill", ("output_tps", "ttft_p95_s", "ttft_p99_s", "e2e_p95_s"))
                 + _perf_table(engines, "rate", ("goodput_rps", "output_tps", "ttft_p95_s", "e2e_p95_s"))),
        _section("Long context and needles", "long_context", charts,
                 "Prefix cache cleared before every request; a needle passes only when its exact string comes back.",
                 _needle_table(engines)),
        _section("Prefix cache: cold vs hot", "prefix_cache", charts,
                 "One cold request after a cache clear, then exact repeats. Effective needs both a TTFT fall of "
                 "at least 30% and a server hit rate of at least 50% over the trial (counter deltas).",
                 _cache_table(engines)),
        _startup_table(engines),
        _checks_table(engines),
        _not_tested_table(summary),
        "<p class='note'>Figures: median over rounds (linear-interpolation percentiles within a round); every "
        "figure lists its round values; spread flag above 25% of the median. Built by DayOne from the run's "
        "tables; nothing on this page was typed by hand.</p>",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p)


# ---- formatting ------------------------------------------------------------------------------------


def _e(value: Any) -> str:
    return escape("" if value is None else str(value))


def num(value: Any, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _e(value)
    if unit == "s":
        return f"{value * 1000:,.1f} ms" if abs(value) < 1 else f"{value:,.2f} s"
    if unit == "%":
        return f"{value:.1%}"
    if isinstance(value, int) or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.3g}"


def figure_cell(figure: dict[str, Any] | None, unit: str = "") -> str:
    """Median, the round values, and the spread flag."""
    if not figure or figure.get("median") is None:
        return "<td class='num na'>n/a</td>"
    rounds = ", ".join(num(v, unit) if v is not None else "failed" for v in figure.get("rounds") or [])
    flag = " <span class='spread' title='rounds spread more than 25% of the median'>spread</span>" \
        if figure.get("spread") else ""
    return f"<td class='num'><b>{num(figure['median'], unit)}</b>{flag}<br><span class='rounds'>{rounds}</span></td>"


def _unit(figure_name: str) -> str:
    return "s" if figure_name.endswith("_s") else ""


FIGURE_WORDS = {
    "output_tps": "output tok/s", "request_tps": "requests/s", "goodput_rps": "goodput req/s",
    "ttft_p50_s": "TTFT P50", "ttft_p95_s": "TTFT P95", "ttft_p99_s": "TTFT P99", "tpot_p50_s": "TPOT P50",
    "tpot_p95_s": "TPOT P95", "itl_p50_s": "ITL P50", "itl_p99_s": "ITL P99", "e2e_p50_s": "E2E P50",
    "e2e_p95_s": "E2E P95", "e2e_p99_s": "E2E P99",
}


def _badge(outcome: Any) -> str:
    cls = {"pass": "pass", "fail": "fail", "effective": "pass", "unconfirmed": "fail", "ok": "pass",
           "failed": "fail", "not_attempted": "na", "not_applicable": "na"}.get(str(outcome), "na")
    return f"<span class='badge {cls}'>{_e(str(outcome).replace('_', ' '))}</span>"


# ---- sections --------------------------------------------------------------------------------------


def _contents(summary: dict[str, Any], charts: dict[str, bytes]) -> str:
    sections = [("decision", "decision"), ("comparison", "engine vs engine")]
    if summary.get("regressions"):
        sections.append(("regressions", "regressions"))
    sections += [(c, words) for c, words in (("throughput", "throughput"), ("ttft", "TTFT"),
                                             ("decode_prefill", "decode and prefill"),
                                             ("long_context", "long context"), ("prefix_cache", "prefix cache"))
                 if c in charts]
    sections += [("startup", "startup"), ("checks", "functional checks"), ("not-tested", "not tested")]
    return "<p class='note'>" + " · ".join(f"<a href='#{i}'>{w}</a>" for i, w in sections) + "</p>"


def _run_meta(summary: dict[str, Any]) -> str:
    v = summary.get("validation") or {}
    if not v.get("ran"):
        validation = "<span class='badge na'>did not run</span>"
    elif v.get("success"):
        validation = "<span class='badge pass'>passed</span>"
    else:
        validation = (f"<span class='badge fail'>failed: {_e(', '.join(v.get('failed_tables') or []))}</span> "
                      "(archived under quarantine/, never a baseline)")
    rows = [
        ("Run", _e(summary.get("run_id"))),
        ("Model", f"{_e(summary.get('model'))} @ {_e(summary.get('model_revision'))}"),
        ("Target", _e(summary.get("target")) + (" (dry run)" if summary.get("dry_run") else "")),
        ("Validation", validation),
    ]
    out = ["<table class='meta'>"] + [f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows] + ["</table>"]
    out.append("<table><tr><th>engine</th><th>dialect</th><th>image</th><th>digest</th><th>ready</th>"
               "<th>TTFT</th><th>restarts</th></tr>")
    for name, e in (summary.get("engines") or {}).items():
        ready = _badge("ok" if e.get("ready") else "failed")
        waited = f" after {num(e.get('ready_waited_s'), 's')}" if e.get("ready_waited_s") is not None else ""
        detail = "" if e.get("ready") else f"<br><span class='evidence'>{_e(e.get('ready_detail'))}</span>"
        ttft_cell = _ttft_status(e)
        out.append(f"<tr><td><b>{_e(name)}</b></td><td>{_e(e.get('dialect'))}</td><td>{_e(e.get('image') or '-')}"
                   f"</td><td class='evidence'>{_e(e.get('image_digest'))}</td><td>{ready}{waited}{detail}</td>"
                   f"<td>{ttft_cell}</td><td>{_restarts_cell(e.get('restarts'))}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def _restarts_cell(restarts: dict[str, Any] | None) -> str:
    """The engine's restarts over the run, and the steps whose figures they flag."""
    if not restarts:
        return "-"
    steps = restarts.get("restarted_steps") or []
    if not steps:
        return "0"
    total = f"{'at least ' if restarts.get('at_least') else ''}{restarts.get('total')}"
    return (f"<span class='badge fail'>{_e(total)}</span> during {_e(', '.join(steps))} "
            "(those steps' figures are flagged)")


def _decision(summary: dict[str, Any]) -> str:
    items = summary.get("decision") or []
    out = ["<h2 id='decision'>Decision summary</h2><div class='decision'>"]
    for topic, title in TOPICS:
        lines = [d["text"] for d in items if d.get("topic") == topic]
        if lines:
            out.append(f"<h3>{title}</h3><ul>" + "".join(f"<li>{_e(t)}</li>" for t in lines) + "</ul>")
    out.append("</div>")
    return "\n".join(out)


def _comparison(engines: dict[str, Any]) -> str:
    """One row per figure, one column per engine, and the leader where the gap exceeds 5%."""
    if not engines:
        return ""
    names = list(engines)
    rows: list[str] = []

    def perf_rows(scenario: str, figure: str, higher: bool) -> None:
        labels: list[str] = []
        for e in engines.values():
            for lv in ((e.get("perf") or {}).get(scenario) or {}).get("levels", []):
                if lv["label"] not in labels:
                    labels.append(lv["label"])
        for label in labels:
            values = {}
            for n, e in engines.items():
                lv = next((x for x in ((e.get("perf") or {}).get(scenario) or {}).get("levels", [])
                           if x["label"] == label), None)
                values[n] = None if lv is None else lv["figures"].get(figure)
            if not any(values.values()):
                continue
            cells = "".join(figure_cell(values[n], _unit(figure)) for n in names)
            rows.append(f"<tr><td>{scenario} {_e(label)}</td><td>{FIGURE_WORDS[figure]}"
                        f"{' ↑' if higher else ' ↓'}</td>{cells}{_leader_cell(values, higher)}</tr>")

    for scenario, figure, higher in (("short", "output_tps", True), ("short", "ttft_p95_s", False),
                                     ("short", "e2e_p95_s", False), ("prefill", "output_tps", True),
                                     ("prefill", "ttft_p95_s", False), ("decode", "output_tps", True),
                                     ("decode", "tpot_p50_s", False), ("rate", "goodput_rps", True)):
        perf_rows(scenario, figure, higher)

    def plain_row(what: str, cell: Any) -> None:
        rows.append(f"<tr><td colspan='2'>{what}</td>" + "".join(f"<td>{cell(engines[n])}</td>" for n in names)
                    + "<td></td></tr>")

    plain_row("functional checks passed", _checks_passed)
    plain_row("long-context needles retrieved", lambda e: f"{e['needles']['passed']}/{e['needles']['total']}"
              if e["needles"]["total"] else "not run")
    plain_row("prefix cache", lambda e: _badge(e["prefix_cache"]["verdict"]) + (
        f" hit rate {num(e['prefix_cache'].get('hit_rate'), '%')}" if e["prefix_cache"].get("hit_rate") is not None
        else "") if e.get("prefix_cache") else "not run")
    plain_row("startup warnings", lambda e: str(sum(1 for f in e.get("startup_findings") or []
                                                   if f.get("severity") != "info")))
    plain_row("TTFT", _ttft_status)
    head = "".join(f"<th>{_e(n)}</th>" for n in names)
    return ("<h2 id='comparison'>Engine vs engine</h2><p class='note'>Medians over rounds with the round values "
            "below; ↑ higher is better, ↓ lower is better. A lead needs a gap above 5%; one resting on a spread "
            "figure is marked uncertain.</p>"
            f"<table><tr><th>scenario</th><th>figure</th>{head}<th>leader</th></tr>" + "".join(rows) + "</table>")


def _leader_cell(values: dict[str, dict[str, Any] | None], higher: bool) -> str:
    c = compare(values, higher)
    if c is None:
        return "<td class='na'>-</td>"
    if c["on_par"]:
        return f"<td>on par ({c['gap']:.1%})</td>"
    uncertain = " <span class='spread'>uncertain</span>" if c["uncertain"] else ""
    return f"<td><b>{_e(c['leader'])}</b> by {c['gap']:.0%}{uncertain}</td>"


def _ttft_status(e: dict[str, Any]) -> str:
    if not e.get("ready"):
        return "<span class='badge na'>not measured</span>"
    if (e.get("ttft") or {}).get("reliable"):
        return "published"
    return "<span class='badge fail'>not published</span>"


def _ttft_reason(e: dict[str, Any]) -> str:
    return str((e.get("ttft") or {}).get("reason") or "").removeprefix("TTFT not published, E2E only: ")


def _checks_passed(e: dict[str, Any]) -> str:
    outcomes = list((e.get("checks") or {}).values())
    if not outcomes:
        return "not run"
    applicable = [o for o in outcomes if o != "not_applicable"]
    failed = [c for c, o in e["checks"].items() if o == "fail"]
    text = f"{applicable.count('pass')}/{len(applicable)}"
    return text + (f" <span class='badge fail'>failed: {_e(', '.join(failed))}</span>" if failed else "")


def _regressions(rows: list[dict[str, Any]]) -> str:
    out = ["<h2 id='regressions'>Regressions</h2><table><tr><th>engine</th><th>scenario</th><th>concurrency</th>"
           "<th>metric</th><th>baseline run</th><th>baseline</th><th>this run</th><th>change</th>"
           "<th>threshold</th><th>verdict</th></tr>"]
    for r in rows:
        verdict = "<span class='badge fail'>regressed</span>" if r.get("regressed") else _badge("ok")
        change = "n/a" if r.get("change") is None else f"{r['change']:+.1%}"
        threshold = "n/a" if r.get("threshold") is None else f"{r['threshold']:+.0%}"
        out.append(f"<tr><td>{_e(r.get('engine'))}</td><td>{_e(r.get('scenario'))}</td>"
                   f"<td>{_e(r.get('concurrency') if r.get('concurrency') is not None else '-')}</td>"
                   f"<td>{_e(r.get('metric'))}</td><td class='evidence'>{_e(r.get('baseline_run_id'))}</td>"
                   f"<td class='num'>{num(r.get('baseline_value'))}</td><td class='num'>{num(r.get('value'))}</td>"
                   f"<td class='num'>{change}</td><td class='num'>{threshold}</td><td>{verdict}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def _section(title: str, chart: str, charts: dict[str, bytes], caption: str, body: str) -> str:
    if chart not in charts and not body:
        return ""
    out = [f"<h2 id='{chart}'>{_e(title)}</h2>"]
    if chart in charts:
        data = base64.b64encode(charts[chart]).decode()
        out.append(f"<figure><img class='chart' alt='{_e(title)}' src='data:image/png;base64,{data}'>"
                   f"<figcaption>{caption}</figcaption></figure>")
    out.append(body)
    return "\n".join(out)


def _perf_table(engines: dict[str, Any], scenario: str, figures: tuple[str, ...]) -> str:
    present = {n: e for n, e in engines.items() if ((e.get("perf") or {}).get(scenario) or {}).get("levels")}
    if not present:
        return ""
    any_perf = next(iter(present.values()))["perf"][scenario]
    head = "".join(f"<th>{FIGURE_WORDS[f]}</th>" for f in figures)
    out = [f"<h3>{_e(scenario)} ({any_perf['input_tokens']} in / {any_perf['output_tokens']} out)</h3>",
           f"<table><tr><th>engine</th><th>level</th>{head}<th>first-encounter round</th><th>failures</th></tr>"]
    for name, e in present.items():
        for lv in e["perf"][scenario]["levels"]:
            cells = "".join(figure_cell(lv["figures"].get(f), _unit(f)) if f in lv["figures"] else
                            "<td class='na'>not published</td>" for f in figures)
            out.append(f"<tr><td>{_e(name)}</td><td>{_e(lv['label'])}</td>{cells}"
                       f"<td>{_first_encounter(lv, e)}</td><td>{_failures(lv)}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def _first_encounter(level: dict[str, Any], engine: dict[str, Any]) -> str:
    """The first round of the shape on a new server (warmup's when it took it) beside the steady medians."""
    first = level.get("first_encounter")
    if not first:
        return "none flagged (the server had met this shape)"
    metrics = ("ttft", "e2e") if (engine.get("ttft") or {}).get("reliable") else ("e2e",)
    parts = []
    for metric in metrics:
        steady = ((level.get("figures") or {}).get(f"{metric}_p99_s") or {}).get("median")
        parts.append(f"{metric.upper()} P95 {num(first.get(f'{metric}_p95_s'), 's')}, "
                     f"P99 {num(first.get(f'{metric}_p99_s'), 's')} (steady P99 {num(steady, 's')})")
    return f"{_e(first.get('source') or 'round ' + str(first.get('round')))}: " + "; ".join(parts)


def _failures(level: dict[str, Any]) -> str:
    bits = []
    if level.get("rounds_failed"):
        bits.append(f"{level['rounds_failed']} round(s) failed")
    if level.get("requests_failed"):
        bits.append(f"{level['requests_failed']} request(s) failed")
    if level.get("length_deviations"):
        bits.append(f"{level['length_deviations']} length deviation(s)")
    return "<span class='badge fail'>" + ", ".join(bits) + "</span>" if bits else "none"


def _latency_table(engines: dict[str, Any]) -> str:
    out = ["<table><tr><th>engine</th><th>level</th><th>P50</th><th>P95</th><th>P99</th>"
           "<th>first-encounter P95</th><th>first-encounter P99</th></tr>"]
    any_row = False
    for name, e in engines.items():
        levels = ((e.get("perf") or {}).get("short") or {}).get("levels", [])
        if not levels:
            continue
        published = (e.get("ttft") or {}).get("reliable")
        metric = "ttft" if published else "e2e"
        if not published:
            out.append(f"<tr><td>{_e(name)}</td><td colspan='6' class='warn'><b>TTFT not published</b>: "
                       f"{_e(_ttft_reason(e))}. E2E shown instead.</td></tr>")
        for lv in levels:
            any_row = True
            first = lv.get("first_encounter") or {}
            cells = "".join(figure_cell(lv["figures"].get(f"{metric}_{p}_s"), "s") for p in ("p50", "p95", "p99"))
            fe = "".join(f"<td class='num'>{num(first.get(f'{metric}_{p}_s'), 's')}"
                         f"{' <span class=rounds>(' + _e(first.get('source')) + ')</span>' if first else ''}</td>"
                         for p in ("p95", "p99"))
            out.append(f"<tr><td>{_e(name)}</td><td>{_e(lv['label'])} {metric.upper()}</td>{cells}{fe}</tr>")
    out.append("</table>")
    return "\n".join(out) if any_row else ""


def _needle_table(engines: dict[str, Any]) -> str:
    """Per engine: one row per (scenario, length, attempt), one column per needle depth."""
    out = []
    for name, e in engines.items():
        rows = (e.get("long_context") or []) + ((e.get("boundary") or {}).get("needles") or [])
        if not rows:
            continue
        published = (e.get("ttft") or {}).get("reliable")
        depths = sorted({r["depth"] for r in rows})
        out.append(f"<h3>{_e(name)}: {e['needles']['passed']}/{e['needles']['total']} long-context needles "
                   "retrieved</h3>")
        head = "".join(f"<th>needle at {d:.0%}</th>" for d in depths)
        out.append(f"<table class='needles'><tr><th>scenario</th><th>target tokens</th><th>attempt</th>{head}</tr>")
        keys = []
        for r in rows:
            key = (r["scenario"], r["target_tokens"], r["attempt"])
            if key not in keys:
                keys.append(key)
        for scenario, target, attempt in keys:
            group = {r["depth"]: r for r in rows if (r["scenario"], r["target_tokens"], r["attempt"]) ==
                     (scenario, target, attempt)}
            first = any(r.get("first_encounter") for r in group.values())
            cells = []
            for d in depths:
                r = group.get(d)
                if r is None:
                    cells.append("<td class='na'>-</td>")
                    continue
                timing = (f"TTFT {num(r.get('ttft_s'), 's')} · " if published else "") + f"E2E {num(r.get('e2e_s'), 's')}"
                detail = (f"answer {r.get('answer')!r}" if r.get("status") == "ok" else
                          f"{r.get('status')}: {r.get('error') or ''}")
                cells.append(f"<td>{_badge('pass' if r['passed'] else 'fail')} <span class='rounds'>{timing}</span>"
                             f"<br><span class='evidence'>{_e(_clip(detail, 60))}</span></td>")
            label = f"{attempt}" + (" (first shape)" if first else "")
            out.append(f"<tr><td>{_e(scenario)}</td><td class='num'>{num(target)}</td><td>{_e(label)}</td>"
                       f"{''.join(cells)}</tr>")
        out.append("</table>")
        if not published:
            out.append(f"<p class='note'>TTFT not published for {_e(name)}: {_e(_ttft_reason(e))}.</p>")
        restarts = (e.get("boundary") or {}).get("restarts")
        if restarts:
            out.append(f"<p class='note'>Boundary restarts: {_badge(restarts.get('outcome'))} "
                       f"{_e(restarts.get('reason'))}</p>")
    return "\n".join(out)


def _cache_table(engines: dict[str, Any]) -> str:
    out = ["<table><tr><th>engine</th><th>verdict</th><th>cold TTFT</th><th>repeats TTFT (median)</th>"
           "<th>TTFT fall</th><th>cold E2E</th><th>repeats E2E (median)</th><th>server hit rate</th>"
           "<th>queries / hits (tokens)</th><th>reason</th></tr>"]
    any_row = False
    for name, e in engines.items():
        pc = e.get("prefix_cache")
        if not pc:
            continue
        any_row = True
        published = (e.get("ttft") or {}).get("reliable")
        ttft = (f"<td class='num'>{num(pc.get('cold_ttft_s'), 's')}</td><td class='num'>"
                f"{num(pc.get('hot_ttft_median_s'), 's')}</td><td class='num'>{num(pc.get('ttft_decrease'), '%')}</td>"
                if published else "<td colspan='3' class='warn'>not published (TTFT unreliable)</td>")
        out.append(f"<tr><td>{_e(name)}</td><td>{_badge(pc.get('verdict'))}</td>{ttft}"
                   f"<td class='num'>{num(pc.get('cold_e2e_s'), 's')}</td>"
                   f"<td class='num'>{num(pc.get('hot_e2e_median_s'), 's')}</td>"
                   f"<td class='num'>{num(pc.get('hit_rate'), '%')}</td>"
                   f"<td class='num'>{num(pc.get('server_queries_delta'))} / {num(pc.get('server_hits_delta'))}</td>"
                   f"<td>{_e(pc.get('reason'))}</td></tr>")
    out.append("</table>")
    return "\n".join(out) if any_row else ""


def _startup_table(engines: dict[str, Any]) -> str:
    out = ["<h2 id='startup'>Startup findings</h2>",
           "<p class='note'>Lines from each engine's startup log that matter for what was measured: fallbacks, "
           "missing tuned configs, JIT and graph capture.</p>",
           "<table><tr><th>engine</th><th>finding</th><th>severity</th><th>log line</th></tr>"]
    count = 0
    for name, e in engines.items():
        for f in e.get("startup_findings") or []:
            count += 1
            sev = f.get("severity")
            cls = {"warning": "warn", "error": "fail"}.get(str(sev), "na")
            out.append(f"<tr><td>{_e(name)}</td><td>{_e(f.get('finding'))}</td>"
                       f"<td><span class='badge {cls}'>{_e(sev)}</span></td>"
                       f"<td class='evidence'>{_e(_clip(f.get('line'), 220))}</td></tr>")
    if not count:
        out.append("<tr><td colspan='4' class='na'>no findings (or the startup log was not read)</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def _checks_table(engines: dict[str, Any]) -> str:
    names = [n for n, e in engines.items() if e.get("check_evidence")]
    checks: list[str] = []
    for n in names:
        for c in engines[n]["check_evidence"]:
            if c not in checks:
                checks.append(c)
    out = ["<h2 id='checks'>Functional checks</h2>",
           "<p class='note'>HTTP 200 is not a pass: each check names the field it read and shows an excerpt.</p>"]
    if not checks:
        out.append("<p class='na'>No functional checks ran.</p>")
        return "\n".join(out)
    head = "".join(f"<th>{_e(n)}</th>" for n in names)
    out.append(f"<table class='checks'><tr><th>check</th>{head}</tr>")
    for c in checks:
        cells = []
        for n in names:
            ev = engines[n]["check_evidence"].get(c)
            if ev is None:
                cells.append("<td class='na'>not run</td>")
                continue
            status = f"HTTP {ev['status']} · " if ev.get("status") is not None else ""
            field = f"{_e(ev.get('field'))}: " if ev.get("field") else ""
            cells.append(f"<td>{_badge(ev.get('outcome'))} {_e(ev.get('reason'))}<br><span class='evidence'>"
                         f"{status}{field}{_e(ev.get('excerpt'))}</span></td>")
        out.append(f"<tr><td><b>{_e(c)}</b></td>{''.join(cells)}</tr>")
    out.append("</table>")
    return "\n".join(out)


def _not_tested_table(summary: dict[str, Any]) -> str:
    items = summary.get("not_tested") or []
    out = ["<h2 id='not-tested'>Not tested</h2>"]
    limits = summary.get("limits") or []
    if limits:
        out.append("<p><b>What no run of this kind proves</b></p><ul class='limits'>"
                   + "".join(f"<li>{_e(text)}</li>" for text in limits) + "</ul>")
    if not items:
        out.append("<p>Every enabled scenario and check ran on every engine.</p>")
        return "\n".join(out)
    out.append("<p><b>What this run did not test</b></p>")
    out.append("<table class='not-tested'><tr><th>engine</th><th>what</th><th>why</th></tr>")
    for item in items:
        out.append(f"<tr><td>{_e(item['engine'])}</td><td>{_e(item['what'])}</td>"
                   f"<td class='evidence'>{_e(_clip(item['why'], 240))}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def _clip(text: Any, limit: int) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"
