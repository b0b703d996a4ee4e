"""Report: summary.json (the figures a reader needs, desensitized) and report.html, per run.

Both are built from the run's tables; nothing here measures. The report is written next to the
archived tables of every engine of the run.
"""

from __future__ import annotations

import html
import logging
import statistics
from typing import Any

import pandas as pd

from tasks.archive import json_bytes, put_once
from tasks.config import RunConfig
from tasks.desensitize import desensitize
from tasks.staging import RunDir

log = logging.getLogger("dayone.report")


def _round_values(group: pd.DataFrame, column: str) -> list[float]:
    return [float(v) for v in group.sort_values("round")[column].tolist() if pd.notna(v)]


def build_summary(run_dir: RunDir, cfg: RunConfig) -> dict[str, Any]:
    rounds = run_dir.frame("rounds")
    checks = run_dir.frame("checks")
    needles = run_dir.frame("needles")
    pinned = run_dir.read_json("pinned.json", {})
    validation = run_dir.read_json("validation.json", {})
    engines: dict[str, Any] = {}
    for e in cfg.engines:
        ready = run_dir.read_json(f"state/{e.name}/ready.json", {})
        er = rounds[(rounds["engine"] == e.name)] if not rounds.empty else rounds
        if "warmup" in er:
            er = er[er["warmup"].fillna(False) == False]  # noqa: E712  (nullable boolean column)
        perf: dict[str, Any] = {}
        for (scenario, conc), g in er.groupby(["scenario", "concurrency"], sort=True) if not er.empty else []:
            tps = _round_values(g, "output_tps")
            p95 = _round_values(g, "ttft_p95_s")
            first = g[g["first_encounter"].fillna(False) == True]  # noqa: E712
            med = statistics.median(tps) if tps else None
            perf.setdefault(str(scenario), {})[str(int(conc))] = {
                "output_tps_median": med,
                "output_tps_rounds": tps,
                "spread_flag": bool(med and tps and (max(tps) - min(tps)) > 0.25 * med),
                "ttft_p95_s_median": statistics.median(p95) if p95 else None,
                "first_encounter_ttft_p95_s": _first(first, "ttft_p95_s"),
                "first_encounter_ttft_p99_s": _first(first, "ttft_p99_s"),
                "rounds_failed": int((g["status"] == "failed").sum()),
            }
        ec = checks[checks["engine"] == e.name] if not checks.empty else checks
        en = needles[needles["engine"] == e.name] if not needles.empty else needles
        reliability = _ttft_reliability(ec)
        engines[e.name] = {
            "dialect": e.dialect,
            "image_digest": pinned.get(e.name, {}).get("image_digest"),
            "ready": bool(ready.get("ready")),
            "ready_detail": ready.get("detail"),
            "checks": {str(r["check"]): str(r["outcome"]) for _, r in ec.iterrows()},
            "perf": perf,
            "needles": {"passed": int(en["passed"].fillna(False).sum()) if not en.empty else 0,
                        "total": int(len(en))},
            "prefix_cache": run_dir.read_json(f"verdicts/{e.name}/prefix_cache.json"),
            "ttft": reliability,
        }
    return desensitize({
        "run_id": cfg.run_id,
        "model": cfg.model.name,
        "model_revision": cfg.model.revision,
        "target": cfg.target,
        "validation_success": bool(validation.get("success")),
        "engines": engines,
    })


def _first(frame: pd.DataFrame, column: str) -> float | None:
    vals = [float(v) for v in frame[column].tolist() if pd.notna(v)] if not frame.empty else []
    return max(vals) if vals else None


def _ttft_reliability(checks: pd.DataFrame) -> dict[str, Any]:
    try:
        from tasks.evidence.reliability import ttft_verdict
    except ImportError:
        return {"reliable": None, "reason": "no reliability verdict available"}
    rows = [] if checks.empty else checks.astype(object).where(checks.notna(), None).to_dict("records")
    return ttft_verdict(rows)


def render_html(summary: dict[str, Any]) -> str:
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>DayOne report {esc(str(summary['run_id']))}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px}th{background:#eee}</style></head><body>",
        f"<h1>DayOne run {esc(str(summary['run_id']))}</h1>",
        f"<p>Model <b>{esc(str(summary['model']))}</b> revision {esc(str(summary['model_revision']))}, "
        f"target {esc(str(summary['target']))}. Validation: "
        f"{'passed' if summary['validation_success'] else 'FAILED (run quarantined)'}.</p>",
    ]
    for name, e in summary["engines"].items():
        parts.append(f"<h2>{esc(name)} ({esc(e['dialect'])})</h2>")
        parts.append(f"<p>Image digest {esc(str(e['image_digest']))}; ready: {e['ready']}.</p>")
        ttft = e.get("ttft") or {}
        if ttft.get("reliable") is False:
            parts.append(f"<p><b>TTFT not published</b>: {esc(str(ttft.get('reason')))}</p>")
        if e["checks"]:
            parts.append("<h3>Functional checks</h3><table><tr><th>check</th><th>outcome</th></tr>")
            parts += [f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in e["checks"].items()]
            parts.append("</table>")
        if e["perf"]:
            parts.append("<h3>Throughput</h3><table><tr><th>scenario</th><th>concurrency</th>"
                         "<th>output tok/s (median)</th><th>rounds</th><th>TTFT p95 s</th>"
                         "<th>first-encounter TTFT p95/p99 s</th></tr>")
            for scen, levels in e["perf"].items():
                for conc, f in levels.items():
                    p95 = f["ttft_p95_s_median"] if ttft.get("reliable") is not False else None
                    parts.append(
                        f"<tr><td>{esc(scen)}</td><td>{esc(conc)}</td><td>{_fmt(f['output_tps_median'])}"
                        f"{' (spread &gt;25%)' if f['spread_flag'] else ''}</td>"
                        f"<td>{', '.join(_fmt(v) for v in f['output_tps_rounds'])}</td><td>{_fmt(p95)}</td>"
                        f"<td>{_fmt(f['first_encounter_ttft_p95_s'])} / {_fmt(f['first_encounter_ttft_p99_s'])}</td></tr>"
                    )
            parts.append("</table>")
        parts.append(f"<p>Needles: {e['needles']['passed']}/{e['needles']['total']} passed.</p>")
        if e.get("prefix_cache"):
            pc = e["prefix_cache"]
            parts.append(f"<p>Prefix cache: <b>{esc(str(pc.get('verdict')))}</b> {esc(str(pc.get('reason', '')))}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.3f}" if isinstance(v, float) else html.escape(str(v))


def publish_report(run_dir: RunDir, cfg: RunConfig, s3: Any) -> dict[str, Any]:
    """Write summary.json and report.html locally and next to every engine's archived run."""
    archived = run_dir.read_json("archive.json")
    if not archived:
        raise RuntimeError(f"run {cfg.run_id}: not archived yet; the archive step must run before the report")
    summary = build_summary(run_dir, cfg)
    page = render_html(summary)
    run_dir.write_json("summary.json", summary)
    (run_dir.path / "report.html").write_text(page, encoding="utf-8")
    keys = []
    for prefix in archived["prefixes"].values():
        put_once(s3, archived["bucket"], prefix + "summary.json", json_bytes(summary), "application/json")
        put_once(s3, archived["bucket"], prefix + "report.html", page.encode(), "text/html")
        keys += [prefix + "summary.json", prefix + "report.html"]
    return {"bucket": archived["bucket"], "keys": keys, "report": str(run_dir.path / "report.html")}
