"""Airflow Assets: an archived DayOne run, so other DAGs can be scheduled on new results.

The archive task of dayone_eval and dayone_nightly lists ARCHIVED_RUN as its outlet; each event's
extra says which run, where it lies and whether it was quarantined, e.g.

    @dag(schedule=[ARCHIVED_RUN])
    def on_new_results(): ...   # read triggering_asset_events[ARCHIVED_RUN][-1].extra["prefixes"]
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset

ARCHIVED_RUN = Asset(name="dayone_archived_run", uri="dayone://archive/runs", group="dayone")


def archive_event_extra(run_id: str, archived: dict[str, Any]) -> dict[str, Any]:
    """The asset event's extra: the run, its bucket and per-engine prefixes, and its quarantine flag."""
    return {
        "run_id": run_id,
        "bucket": archived.get("bucket"),
        "prefixes": dict(archived.get("prefixes") or {}),
        "quarantined": bool(archived.get("quarantined")),
    }
