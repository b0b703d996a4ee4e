"""Credentials come from Airflow connections only, never from code or params: the archive (S3),
the run state's staging prefix (S3, DAYONE_STAGING), the cluster (the provider's KubernetesHook),
the image registry and engines' API keys (`api_key_connection`: the key is the password)."""

from __future__ import annotations

from typing import Any


ARCHIVE_CONN_DEFAULT = "dayone_s3"
# Run state under DAYONE_STAGING is a deployment's setting, not a run's: always this connection.
STAGING_CONN_ID = "dayone_s3"


class ArchiveConnectionMissing(RuntimeError):
    """The run's archive connection does not exist: the run could measure, but archive nothing."""


def archive_conn_id(config: dict[str, Any]) -> str:
    return (config.get("archive") or {}).get("conn_id") or ARCHIVE_CONN_DEFAULT


def require_archive_connection(config: dict[str, Any]) -> str:
    """Fail at once, naming the fix, when the archive connection is not defined (checked at plan,
    so a run without one stops before any engine is deployed, not after the measurements)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    conn_id = archive_conn_id(config)
    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise ArchiveConnectionMissing(
            f"the archive connection {conn_id!r} is not defined, so nothing this run measures could be archived. "
            f"Add it (README, 'Pointing DayOne at a real cluster and real S3'): Admin -> Connections in the UI, or "
            f"`airflow connections add {conn_id} --conn-type aws --conn-login ACCESS_KEY_ID --conn-password "
            f"SECRET_KEY --conn-extra '{{\"endpoint_url\": \"https://s3.example\"}}'` (omit endpoint_url for "
            f"AWS), or set AIRFLOW_CONN_{conn_id.upper()}; or name another one in the run config's archive.conn_id"
        ) from None
    return conn_id


def s3_client(config: dict[str, Any]) -> Any:
    """boto3 S3 client from the archive connection (default `dayone_s3`).

    login = access key id, password = secret key, extra = {"endpoint_url": ..., "region_name": ...}.
    """
    from airflow.sdk import BaseHook

    from tasks.publish.archive import make_client

    conn = BaseHook.get_connection(require_archive_connection(config))
    extra = conn.extra_dejson or {}
    return make_client(extra.get("endpoint_url"), conn.login, conn.password, extra.get("region_name"))


def staging_store() -> Any:
    """Where runs keep their state: the S3 prefix DAYONE_STAGING names (s3://BUCKET/PREFIX), reached
    with the `dayone_s3` connection; None when DAYONE_STAGING is unset (the worker's own directory,
    DAYONE_WORKDIR: one machine only, as in make demo)."""
    import os

    from tasks.state.object_store import STAGING_ENV, S3Access, staging_from_env

    if not os.environ.get(STAGING_ENV, "").strip():
        return None
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(STAGING_CONN_ID)
    except AirflowNotFoundException:
        raise ArchiveConnectionMissing(
            f"{STAGING_ENV} puts run state in S3, but the connection {STAGING_CONN_ID!r} it is reached with is not "
            f"defined. Add it (docs/deploy.md, 'Run state in S3'), e.g. AIRFLOW_CONN_{STAGING_CONN_ID.upper()}, or "
            f"unset {STAGING_ENV} to keep run state on the worker's disk (one machine only)") from None
    extra = conn.extra_dejson or {}
    return staging_from_env(S3Access(extra.get("endpoint_url"), conn.login, conn.password, extra.get("region_name")))


def hook_api_client(conn_id: str) -> Any:
    """A `kubernetes.client.ApiClient` configured by the provider from an Airflow connection."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id=conn_id).get_conn()


def registry_credentials(config: Any) -> tuple[str, str] | None:
    """(login, password) of `kubernetes.registry_conn_id`, or None for anonymous pulls."""
    conn_id = config.kubernetes.registry_conn_id
    if not conn_id:
        return None
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    if not conn.login:
        return None
    return conn.login, conn.password or ""


def cluster_access() -> Any:
    """The cluster's API client and the registry's credentials from Airflow connections."""
    from tasks.targets.kubernetes import ClusterAccess

    return ClusterAccess(api_client=hook_api_client, registry_credentials=registry_credentials)


def connection_password(conn_id: str) -> str | None:
    """An engine's API key: the password of the connection its config names (`api_key_connection`)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    from tasks.engines.access import ApiKeyMissing

    try:
        return BaseHook.get_connection(conn_id).password or None
    except AirflowNotFoundException:
        raise ApiKeyMissing(
            f"the API key connection {conn_id!r} is not defined. Add it with the key as its password, e.g. "
            f"`airflow connections add {conn_id} --conn-type generic --conn-password KEY`, or "
            f"AIRFLOW_CONN_{conn_id.upper()}") from None
