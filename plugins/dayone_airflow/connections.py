"""Credentials come from Airflow connections only, never from code or params."""

from __future__ import annotations

from typing import Any


def s3_client(config: dict[str, Any]) -> Any:
    """boto3 S3 client from the archive connection (default `dayone_s3`).

    login = access key id, password = secret key, extra = {"endpoint_url": ..., "region_name": ...}.
    """
    from airflow.sdk import BaseHook

    from tasks.archive import make_client

    conn_id = (config.get("archive") or {}).get("conn_id", "dayone_s3")
    conn = BaseHook.get_connection(conn_id)
    extra = conn.extra_dejson or {}
    return make_client(extra.get("endpoint_url"), conn.login, conn.password, extra.get("region_name"))
