"""Where a run is archived: the S3 bucket, key prefix and Airflow connection."""

from __future__ import annotations

from pydantic import Field

from tasks.config.base import ConfigModel


class ArchiveSettings(ConfigModel):
    bucket: str = Field("dayone", min_length=3, description="S3 bucket of the archive and the digest catalog.")
    prefix: str = Field("runs", description="Key prefix of archived runs in the bucket.")
    conn_id: str = Field("dayone_s3", description="Airflow connection: login/password and endpoint_url in extra.")
