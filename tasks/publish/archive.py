"""Archive a run to S3-compatible storage (PROTOCOL.md section 7).

`s3://BUCKET/runs/MODEL/ENGINE/DIGEST12/RUN_ID/`: manifest.json, the tables as CSV and Parquet,
validation.json, warmup_matrix.json (the warmup a production deployment should run), engine.log (the
engine's own log, scrubbed); the report step adds summary.json and report.html. A run whose tables failed
validation goes under `quarantine/` and never becomes a baseline. Objects are written once: an existing key with
the same bytes is left alone (a retry succeeds), different bytes are an error.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from botocore.exceptions import ClientError, EndpointConnectionError
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from tasks.state import documents as run_documents
from tasks.config import RunConfig
from tasks.core.desensitize import desensitize, scrub_text
from tasks.state.storage import RunDir
from tasks.state.object_store import client_from_env, make_client  # noqa: F401  (the archive's S3 client, named here too)
from tasks.state.tables import TABLES, to_csv_bytes, to_frame, to_parquet_bytes

log = logging.getLogger("dayone.archive")

QUARANTINE = "quarantine/"


class WriteOnceError(RuntimeError):
    """An archived object exists with different bytes: runs are never overwritten."""


def model_slug(model: str) -> str:
    return model.replace("/", "--")


def digest12(digest: str) -> str:
    return digest.split(":", 1)[-1][:12]


def engine_prefix(cfg: RunConfig, engine: str, digest: str, quarantined: bool) -> str:
    root = QUARANTINE if quarantined else ""
    return f"{root}{cfg.archive.prefix}/{model_slug(cfg.model.name)}/{engine}/{digest12(digest)}/{cfg.run_id}/"


def index_key(cfg: RunConfig) -> str:
    """One small document per run listing its engine prefixes: what baselines are looked up by."""
    return f"{cfg.archive.prefix}/{model_slug(cfg.model.name)}/_index/{cfg.run_id}.json"


_TRANSIENT = (EndpointConnectionError, ConnectionError, TimeoutError)


def _is_missing(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound", "NoSuchBucket")


@retry(retry=retry_if_exception_type(_TRANSIENT), wait=wait_exponential(multiplier=0.5, max=10),
       stop=stop_after_delay(120), reraise=True)
def ensure_bucket(s3: Any, bucket: str) -> None:
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError as exc:
        if not _is_missing(exc):
            raise
        s3.create_bucket(Bucket=bucket)


@retry(retry=retry_if_exception_type(_TRANSIENT), wait=wait_exponential(multiplier=0.5, max=10),
       stop=stop_after_delay(120), reraise=True)
def put_once(s3: Any, bucket: str, key: str, body: bytes, content_type: str = "application/octet-stream") -> bool:
    """Write `body` at `key` unless it is already there. Returns True when it wrote."""
    md5 = hashlib.md5(body).hexdigest()  # noqa: S324  (S3's ETag of a single-part put, not security)
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if not _is_missing(exc):
            raise
    else:
        if head.get("ETag", "").strip('"') == md5 and head.get("ContentLength") == len(body):
            return False
        raise WriteOnceError(f"s3://{bucket}/{key} exists with different content; archived runs are never overwritten")
    s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType=content_type)
    return True


def json_bytes(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n").encode()


def comparison_record(run_dir: RunDir) -> dict[str, Any] | None:
    """Whether the run passed its own regression comparison (the nightly's compare step, which runs before
    the archive): what makes it a later run's "last good run" (tasks/compare/nightly.py). None: it made none."""
    outcome = run_dir.read_json(run_documents.outcome_doc("compare", None))
    if outcome is None:
        return None
    found = run_dir.read_json(run_documents.REGRESSIONS) or {}
    return {"passed": outcome.get("status") == "ok", "regressions": len(found.get("regressions") or []),
            "accepted": list(found.get("accepted") or [])}


def archive_run(run_dir: RunDir, cfg: RunConfig, s3: Any) -> dict[str, Any]:
    """Upload manifest, tables and validation for every engine. Safe to retry."""
    validation = run_dir.read_json(run_documents.VALIDATION)
    quarantined = not (validation and validation.get("success"))
    pinned = run_documents.pinned(run_dir)
    manifest = desensitize(run_documents.manifest(run_dir) or {})
    bucket = cfg.archive.bucket
    ensure_bucket(s3, bucket)
    frames = {name: run_dir.frame(name) for name in TABLES}
    keys: list[str] = []
    prefixes: dict[str, str] = {}
    for e in cfg.engines:
        digest = pinned.get(e.name, {}).get("image_digest", "sha256:unpinned")
        prefix = engine_prefix(cfg, e.name, digest, quarantined)
        prefixes[e.name] = prefix
        objects: dict[str, tuple[bytes, str]] = {
            run_documents.MANIFEST: (json_bytes(manifest), "application/json"),
            # validation results quote failing cells (error text): scrubbed like the tables themselves
            run_documents.VALIDATION: (json_bytes(desensitize(validation or {"success": False,
                                                                      "reason": "validation did not run"})),
                                "application/json"),
        }
        engine_log = run_dir.read_bytes(run_documents.kept_log_doc(e.name))
        if engine_log is not None:  # scrubbed when kept; again with the keys read for this step
            objects["engine.log"] = (scrub_text(engine_log.decode("utf-8", errors="replace")).encode(), "text/plain")
        warmup = run_dir.read_json(run_documents.WARMUP_MATRIX)
        if warmup:  # the warmup a production deployment should run (tasks/scenarios/warmup.py)
            objects[run_documents.WARMUP_MATRIX] = (json_bytes(warmup), "application/json")
        chat = run_dir.read_json(run_documents.openwebui_chat_doc(e.name))
        if chat:  # what OpenWebUI itself stored: the evidence behind the openwebui checks
            objects["openwebui/chat.json"] = (json_bytes(desensitize(chat)), "application/json")
        for name, frame in frames.items():
            part = to_frame(name, []) if frame.empty else frame[frame["engine"] == e.name].reset_index(drop=True)
            objects[f"tables/{name}.csv"] = (to_csv_bytes(part), "text/csv")
            objects[f"tables/{name}.parquet"] = (to_parquet_bytes(part), "application/vnd.apache.parquet")
        for rel, (body, ctype) in sorted(objects.items()):
            put_once(s3, bucket, prefix + rel, body, ctype)
            keys.append(prefix + rel)
    index = {"run_id": cfg.run_id, "model": cfg.model.name, "quarantined": quarantined, "prefixes": prefixes,
             "created_ts": manifest.get("created_ts"), "engines": {e: pinned.get(e, {}).get("image_digest")
                                                                   for e in prefixes},
             "comparison": comparison_record(run_dir)}
    put_once(s3, bucket, index_key(cfg), json_bytes(index), "application/json")
    keys.append(index_key(cfg))
    result = {"bucket": bucket, "quarantined": quarantined, "prefixes": prefixes, "keys": keys}
    run_dir.write_json(run_documents.ARCHIVED, result)
    log.info("archived run %s to s3://%s (%d objects%s)", cfg.run_id, bucket, len(keys),
             ", QUARANTINED" if quarantined else "")
    return result
