"""Where a run's state is kept: a directory on this machine, or a prefix in S3-compatible storage.

Both stores hold whole objects under keys relative to their root: put, get, list and delete, nothing
else; the run's layout is tasks/state/documents.py's and tasks/state/storage.py's. A shared-nothing Airflow (Celery or
Kubernetes executor) keeps run state under `DAYONE_STAGING=s3://BUCKET/PREFIX`, one prefix per run; a
local directory (DAYONE_WORKDIR) is the default of `make demo` and the CLI. The S3 store speaks boto3
(the archive's client already), not fsspec/s3fs: s3fs needs aiobotocore, which pins botocore below the
release boto3 brings, and a store needs five calls.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STAGING_ENV = "DAYONE_STAGING"  # s3://BUCKET/PREFIX: where runs keep their state; unset: this machine


def make_client(endpoint_url: str | None, access_key: str | None, secret_key: str | None,
                region: str | None = None) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint_url or None,
        aws_access_key_id=access_key or None,
        aws_secret_access_key=secret_key or None,
        region_name=region or "us-east-1",
        config=Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=5, read_timeout=60,
                      s3={"addressing_style": "path"}),
    )


@dataclass(frozen=True)
class S3Access:
    """How to reach an S3-compatible endpoint: plain values, so a writer process can be handed them
    (down a pipe, never on a command line). None: boto3's own lookup (environment, instance role)."""

    endpoint_url: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    region: str | None = None

    @classmethod
    def from_env(cls) -> S3Access:
        """The CLI's and runner pods': AWS_* credentials and DAYONE_S3_ENDPOINT_URL."""
        return cls(os.environ.get("DAYONE_S3_ENDPOINT_URL"), os.environ.get("AWS_ACCESS_KEY_ID"),
                   os.environ.get("AWS_SECRET_ACCESS_KEY"), os.environ.get("AWS_DEFAULT_REGION"))

    def client(self) -> Any:
        return make_client(self.endpoint_url, self.access_key, self.secret_key, self.region)


def client_from_env() -> Any:
    """For the CLI and runner pods: AWS_* credentials and DAYONE_S3_ENDPOINT_URL from the environment."""
    return S3Access.from_env().client()


class LocalStore:
    """Objects as files under a directory; a put replaces the file atomically."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def child(self, name: str) -> LocalStore:
        return LocalStore(self.root / name)

    def where(self, key: str = "") -> str:
        return str(self.root / key) if key else str(self.root)

    def put(self, key: str, data: bytes) -> None:
        p = self.root / key
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(p)

    def get(self, key: str) -> bytes | None:
        try:
            return (self.root / key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def keys(self, prefix: str = "") -> list[str]:
        """Every object whose key starts with `prefix` (a folder ends in /), sorted."""
        folder, _, start = prefix.rpartition("/")
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return []
        found = (p.relative_to(self.root).as_posix() for p in base.rglob("*") if p.is_file())
        return sorted(k for k in found if k.startswith(prefix) and not k.endswith(".tmp"))

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            (self.root / key).unlink(missing_ok=True)


def _missing(exc: Exception, codes: tuple[str, ...] = ("404", "NoSuchKey", "NotFound")) -> bool:
    response = getattr(exc, "response", None) or {}
    return response.get("Error", {}).get("Code") in codes


class S3Store:
    """Objects under `s3://BUCKET/PREFIX/`. One boto3 client per store and its children (boto3's
    clients are thread-safe); the bucket is created on the first put that finds it missing."""

    def __init__(self, access: S3Access, bucket: str, prefix: str = "", _client: list[Any] | None = None):
        self.access, self.bucket, self.prefix = access, bucket, prefix.strip("/")
        self._client = _client if _client is not None else []  # shared with children, built on first use

    @property
    def client(self) -> Any:
        if not self._client:
            self._client.append(self.access.client())
        return self._client[0]

    def child(self, name: str) -> S3Store:
        return S3Store(self.access, self.bucket, f"{self.prefix}/{name}".strip("/"), self._client)

    def spec(self) -> tuple[S3Access, str, str]:
        """What another process needs to open the same store (`S3Store(*spec)`)."""
        return self.access, self.bucket, self.prefix

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def where(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    def put(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except Exception as exc:
            if not _missing(exc, ("NoSuchBucket",)):
                raise
            self.client.create_bucket(Bucket=self.bucket)
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def get(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except Exception as exc:
            if _missing(exc, ("404", "NoSuchKey", "NotFound", "NoSuchBucket")):
                return None
            raise

    def keys(self, prefix: str = "") -> list[str]:
        base = self._key("")
        found: list[str] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base + prefix)
        try:
            for page in pages:
                found += [o["Key"][len(base):] for o in page.get("Contents", ())]
        except Exception as exc:
            if _missing(exc, ("NoSuchBucket",)):
                return []
            raise
        return sorted(found)

    def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1,000 keys
            batch = [{"Key": self._key(k)} for k in keys[start:start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})


Store = LocalStore | S3Store


def parse_staging(value: str) -> tuple[str, str]:
    """`s3://BUCKET/PREFIX` -> (bucket, prefix); anything else raises ConfigError naming the fix."""
    from tasks.config import ConfigError  # here: a row writer process imports this module, and fast

    rest = value.strip().removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    if not value.strip().startswith("s3://") or not bucket:
        raise ConfigError([(STAGING_ENV, f"{value!r} is not an S3 prefix",
                            "set it to s3://BUCKET/PREFIX (e.g. s3://dayone/staging), or unset it to keep run "
                            "state in the local directory DAYONE_WORKDIR")])
    return bucket, prefix.strip("/")


def staging_from_env(access: S3Access | None = None) -> S3Store | None:
    """The S3 store DAYONE_STAGING names (reached with `access`, default the AWS_* environment), or
    None when it is unset: run state stays on this machine."""
    value = os.environ.get(STAGING_ENV, "").strip()
    if not value:
        return None
    bucket, prefix = parse_staging(value)
    return S3Store(access or S3Access.from_env(), bucket, prefix)
