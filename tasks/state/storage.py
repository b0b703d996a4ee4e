"""A run's storage (RunDir): its documents, objects and table partitions, on this machine or under an S3
prefix (tasks/state/object_store.py), so the next task finds them from any worker; and the run id that names it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.state.partitions import RowWriter, json_default, partition_writer, read_partitions
from tasks.state.object_store import LocalStore, Store
from tasks.state.tables import TABLES

if TYPE_CHECKING:
    import pandas as pd

    from tasks.config import RunConfig

ADHOC_RUN_ID = "adhoc"  # a config used outside any run (a library call, a test): no one named it


def default_root() -> Path:
    return Path(os.environ.get("DAYONE_WORKDIR", Path.home() / ".dayone" / "work"))


def run_id_of(config: RunConfig, run_dir: RunDir | None = None) -> str:
    """The run's id: the one its config carries (whoever started the run named it), else its storage's."""
    return config.run_id or (run_dir.run_id if run_dir is not None else ADHOC_RUN_ID)


def new_run_id(prefix: str) -> str:
    """A CLI's name for a run it starts unnamed: `<prefix>-<UTC time>`."""
    return time.strftime(f"{prefix}-%Y%m%dT%H%M%SZ", time.gmtime())


class NoLocalPath(RuntimeError):
    """The run's state is in object storage: nothing of it is on this machine's disk."""


class RunDir:
    """One run's state: `<root>/<run_id>/` on this machine (root: a directory, default
    DAYONE_WORKDIR) or under an S3 prefix (root: an S3Store, e.g. from DAYONE_STAGING). Every read
    and write of run state goes through here: JSON documents, other objects (the report, rendered
    manifests), and table partitions (`tables/<table>/<engine>/<partition>`)."""

    def __init__(self, run_id: str, root: Path | Store | None = None):
        self.run_id = run_id
        if root is None or isinstance(root, (str, os.PathLike)):
            self.store: Store = LocalStore(Path(root or default_root()) / run_id)
            self.store.root.mkdir(parents=True, exist_ok=True)
        else:
            self.store = root.child(run_id)

    @property
    def path(self) -> Path:
        """The run's directory on this machine; raises NoLocalPath when its state is in S3."""
        if isinstance(self.store, LocalStore):
            return self.store.root
        raise NoLocalPath(f"run {self.run_id} keeps its state in {self.store.where()}; nothing of it is on "
                          "this machine's disk (read it through RunDir)")

    def where(self, name: str = "") -> str:
        """Where `name` lies, for messages: a path on this machine or an s3:// URL."""
        return self.store.where(name)

    def node_dir(self, name: str) -> Path:
        """A directory on this machine for what is node-local by nature (a local engine's log): in the
        run directory when run state is local, else under DAYONE_WORKDIR/<run_id>/."""
        d = (self.path if isinstance(self.store, LocalStore) else default_root() / self.run_id) / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    # ---- documents and objects ----

    def write_json(self, name: str, doc: Any) -> str:
        self.store.put(name, json.dumps(doc, indent=2, sort_keys=True, default=json_default).encode("utf-8"))
        return self.where(name)

    def read_json(self, name: str, default: Any = None) -> Any:
        data = self.store.get(name)
        return default if data is None else json.loads(data.decode("utf-8"))

    def write_bytes(self, name: str, data: bytes) -> str:
        self.store.put(name, data)
        return self.where(name)

    def read_bytes(self, name: str) -> bytes | None:
        return self.store.get(name)

    def names(self, folder: str) -> list[str]:
        """The objects directly in `folder` (e.g. OUTCOMES_DIR, the step outcomes), by name, sorted."""
        prefix = folder.rstrip("/") + "/"
        return sorted({k[len(prefix):] for k in self.store.keys(prefix) if "/" not in k[len(prefix):]})

    # ---- table partitions ----

    @contextmanager
    def rows(self, table: str, engine: str, partition: str) -> Iterator[RowWriter]:
        """Write one partition, replacing what an earlier try wrote there."""
        if table not in TABLES:
            raise KeyError(f"unknown table {table!r}")
        writer = partition_writer(self.store, table, engine, partition)
        try:
            yield writer
        except BaseException:
            with suppress(Exception):  # the rows written so far are evidence; the error is the step's
                writer.close()
            raise
        writer.close()

    def read_rows(self, table: str, engine: str | None = None) -> list[dict[str, Any]]:
        return read_partitions(self.store, table, engine)

    def frame(self, table: str, engine: str | None = None) -> pd.DataFrame:
        from tasks.state.tables import to_frame

        return to_frame(table, self.read_rows(table, engine))
