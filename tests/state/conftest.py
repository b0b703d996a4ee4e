"""Run state under an S3 staging prefix on the suite's real S3 server (SeaweedFS, tests/conftest.py)."""

from __future__ import annotations

import uuid

import pytest

STAGING_BUCKET = "dayone-staging-test"


@pytest.fixture()
def staging(s3_server):
    """An S3 staging prefix of this test's own: `S3Store` rooted at s3://dayone-staging-test/<uuid>/."""
    from tasks.state.object_store import S3Access, S3Store

    access = S3Access(s3_server.endpoint_url, s3_server.access_key, s3_server.secret_key, "us-east-1")
    return S3Store(access, STAGING_BUCKET, f"staging-{uuid.uuid4().hex[:8]}")


@pytest.fixture()
def staging_env(staging, s3_server) -> dict[str, str]:
    """What `dayone step` reads to keep run state under `staging` (and to archive to the same server)."""
    return {"DAYONE_STAGING": f"s3://{staging.bucket}/{staging.prefix}", "DAYONE_S3_ENDPOINT_URL": s3_server.endpoint_url,
            "AWS_ACCESS_KEY_ID": s3_server.access_key, "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1"}
