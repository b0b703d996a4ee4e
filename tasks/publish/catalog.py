"""The digest catalog: per logical date, the digest each engine was pinned to (PROTOCOL.md section 7).

`s3://BUCKET/catalog/MODEL/<logical date>.json` = {"logical_date", "run_id", "engines": {name: {image,
image_digest, index_digest, platform_digest}}, and "openwebui": {image, pinned_ref} where the openwebui step
ran on Kubernetes}. A nightly run records the digests it pinned; any later
run for the same logical date (a retry, a rerun, a backfill) reads them and deploys exactly those, so a
date always means the same images. Entries are written once, like the archive.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import TYPE_CHECKING, Any

from tasks.publish.archive import ensure_bucket, json_bytes, model_slug, put_once
from tasks.config import RunConfig, parse_run_config

if TYPE_CHECKING:
    pass

log = logging.getLogger("dayone.catalog")

CATALOG_ROOT = "catalog"


class CatalogError(RuntimeError):
    """The catalog cannot give what a run needs; the message says what to do."""


def date_label(logical_date: dt.datetime) -> str:
    """A logical date as a key segment: 2026-11-30T00-00-00Z (UTC)."""
    if logical_date.tzinfo is None:
        logical_date = logical_date.replace(tzinfo=dt.timezone.utc)
    return logical_date.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")


def entry_key(cfg: RunConfig, logical_date: dt.datetime) -> str:
    return f"{CATALOG_ROOT}/{model_slug(cfg.model.name)}/{date_label(logical_date)}.json"


def read_entry(s3: Any, cfg: RunConfig, logical_date: dt.datetime) -> dict[str, Any] | None:
    from botocore.exceptions import ClientError

    try:
        body = s3.get_object(Bucket=cfg.archive.bucket, Key=entry_key(cfg, logical_date))["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound", "NoSuchBucket"):
            return None
        raise
    return json.loads(body)


def record(s3: Any, cfg: RunConfig, logical_date: dt.datetime, pinned: dict[str, dict[str, Any]],
           run_id: str, openwebui: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the date's entry once; a retry of the same run writes the same bytes and succeeds."""
    entry = {
        "logical_date": date_label(logical_date),
        "model": cfg.model.name,
        "run_id": run_id,
        "engines": {
            name: {
                "image": p.get("image") or cfg.engine(name).image,
                "image_digest": p["image_digest"],
                "index_digest": p.get("index_digest"),
                "platform_digest": p.get("platform_digest"),
            }
            for name, p in sorted(pinned.items())
        },
        **({"openwebui": {"image": cfg.scenarios.openwebui.image, "pinned_ref": openwebui["pinned_ref"]}}
           if openwebui else {}),
    }
    ensure_bucket(s3, cfg.archive.bucket)
    put_once(s3, cfg.archive.bucket, entry_key(cfg, logical_date), json_bytes(entry), "application/json")
    return entry


def list_dates(s3: Any, cfg: RunConfig) -> list[str]:
    prefix = f"{CATALOG_ROOT}/{model_slug(cfg.model.name)}/"
    out: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=cfg.archive.bucket, Prefix=prefix):
        out += [o["Key"][len(prefix):].removesuffix(".json") for o in page.get("Contents", [])]
    return sorted(out)


def with_digests(config: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """The run config with each engine's digest, and OpenWebUI's image, taken from a catalog entry (explicit
    digests win)."""
    engines = []
    missing = []
    for i, e in enumerate(config.get("engines") or parse_run_config(config).model_dump(mode="json")["engines"]):
        e = dict(e)
        recorded = (entry.get("engines") or {}).get(e["name"])
        if not e.get("digest"):
            if recorded is None:
                missing.append(f"engines[{i}] ({e['name']})")
            else:
                e["digest"] = recorded["image_digest"]
        engines.append(e)
    recorded_openwebui = (entry.get("openwebui") or {}).get("pinned_ref")
    scenarios = dict(config.get("scenarios") or {})
    openwebui = dict(scenarios.get("openwebui") or {})
    if recorded_openwebui and "@" not in str(openwebui.get("image") or ""):  # a digest in the conf wins
        scenarios["openwebui"] = {**openwebui, "image": recorded_openwebui}
        config = {**config, "scenarios": scenarios}
    if missing:
        raise CatalogError(
            f"{', '.join(missing)}: no digest recorded for {entry.get('logical_date')}. "
            f"Fix: give engines[].digest in the run conf, or use engines the catalog has "
            f"({', '.join(sorted(entry.get('engines') or {})) or 'none'})"
        )
    return {**config, "engines": engines}
