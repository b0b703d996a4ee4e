"""Where a traffic file lives (a trace, a prompt dataset): a file shipped in the runner image or an object
of the run's S3 store (through `dayone_s3`), read line by line, never whole."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tasks.config import ConfigError


@contextmanager
def file_lines(field: str, what: str, path: str | None, s3_key: str | None, s3_bucket: str | None,
               archive_bucket: str, s3: Callable[[], Any] | None) -> Iterator[Iterator[bytes]]:
    """The lines of `s3_key` (in `s3_bucket`, default the archive's) or of `path`, as they are read. `field`
    is the config section errors name; `what` the file's name in words ("trace", "dataset")."""
    if s3_key:
        bucket = s3_bucket or archive_bucket
        if s3 is None:
            raise ConfigError([(f"{field}.s3_key", f"no S3 connection to read the {what} from",
                                "create the dayone_s3 connection (AWS_* for the CLI), or give path")])
        try:
            body = s3().get_object(Bucket=bucket, Key=s3_key)["Body"]
        except Exception as exc:  # noqa: BLE001  (botocore's errors name the code; any failure is the same fix)
            code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code", type(exc).__name__)
            raise ConfigError([(f"{field}.s3_key", f"the {what} object {s3_key!r} in bucket {bucket!r} "
                                                   f"cannot be read ({code})",
                                f"upload the {what} there, or correct s3_key / s3_bucket")]) from None
        try:
            yield body.iter_lines(keepends=True)
        finally:
            body.close()
        return
    try:
        f = open(path or "", "rb")  # noqa: SIM115  (closed below, after the caller's reading)
    except OSError as exc:
        raise ConfigError([(f"{field}.path", f"the {what} file {path!r} cannot be read ({exc.strerror})",
                            "ship the file in the runner image at that path, or give s3_key")]) from None
    with f:
        yield iter(f)
