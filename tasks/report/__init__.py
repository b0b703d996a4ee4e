"""Report: summary.json (the figures a reader needs, desensitized) and report.html, per run.

Both are built from the run's tables; nothing here measures. summary.py builds the one document
(a RunSummary, schema.py), decision.py writes the decision summary from it, charts.py draws the
PNGs and html.py renders the self-contained page from templates/. The report is written next to
the archived tables of every engine of the run (summary.json, report.html, charts/<name>.png;
PROTOCOL.md section 7), write-once like the rest.
"""

from __future__ import annotations

import logging
from typing import Any

from tasks.state import documents as run_documents
from tasks.publish.archive import json_bytes, put_once
from tasks.config import RunConfig
from tasks.report.html import render_html
from tasks.report.schema import RunSummary, read_summary
from tasks.report.summary import build_summary
from tasks.state.storage import RunDir

log = logging.getLogger("dayone.report")

__all__ = ["RunSummary", "build_summary", "read_summary", "render_html", "publish_report", "write_report"]


def write_report(run_dir: RunDir, cfg: RunConfig) -> dict[str, Any]:
    """Build summary.json, charts/*.png and report.html in the run's storage; returns what was written
    (the bytes the archive copies, so nothing is read back)."""
    from tasks.report.charts import render_charts

    summary = build_summary(run_dir, cfg)
    charts = render_charts(summary)
    page = render_html(summary, charts)
    run_dir.write_json(run_documents.SUMMARY, summary.model_dump(mode="json"))
    for name, png in charts.items():
        run_dir.write_bytes(run_documents.chart_doc(name), png)
    run_dir.write_bytes(run_documents.REPORT, page.encode("utf-8"))
    return {"summary": summary, "charts": charts, "page": page}


def publish_report(run_dir: RunDir, cfg: RunConfig, s3: Any) -> dict[str, Any]:
    """Write the report in the run's storage and next to every engine's archived run."""
    archived = run_dir.read_json(run_documents.ARCHIVED)
    if not archived:
        raise RuntimeError(f"run {cfg.run_id}: not archived yet; the archive step must run before the report")
    built = write_report(run_dir, cfg)
    objects = {
        run_documents.SUMMARY: (json_bytes(built["summary"].model_dump(mode="json")), "application/json"),
        run_documents.REPORT: (built["page"].encode("utf-8"), "text/html; charset=utf-8"),
        **{run_documents.chart_doc(name): (png, "image/png") for name, png in built["charts"].items()},
    }
    keys = []
    for prefix in archived["prefixes"].values():
        for rel, (body, content_type) in sorted(objects.items()):
            put_once(s3, archived["bucket"], prefix + rel, body, content_type)
            keys.append(prefix + rel)
    log.info("report for run %s: %d objects under %d prefixes", cfg.run_id, len(keys), len(archived["prefixes"]))
    return {"bucket": archived["bucket"], "keys": keys, "report": run_dir.where(run_documents.REPORT)}
