"""The run's working directory: where each step writes its own partition of each table.

A task is a transaction: it owns its partitions (engine x scenario) and rewrites them whole on a
retry, so a retried task never duplicates or mixes rows. Rows are appended and flushed as they
complete, so a crash of the worker loses at most the requests in flight.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tasks.tables import TABLES

if TYPE_CHECKING:
    import pandas as pd


def default_root() -> Path:
    return Path(os.environ.get("DAYONE_WORKDIR", Path.home() / ".dayone" / "work"))


class RowWriter:
    def __init__(self, fh: IO[str]):
        self._fh = fh
        self.count = 0

    def write(self, row: dict[str, Any]) -> None:
        self._fh.write(json.dumps(row, default=_json_default) + "\n")
        self._fh.flush()
        self.count += 1


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


class RunDir:
    """`<root>/<run_id>/`: tables/<table>/<engine>/<partition>.jsonl, plus JSON documents."""

    def __init__(self, run_id: str, root: Path | None = None):
        self.run_id = run_id
        self.path = (root or default_root()) / run_id
        self.path.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def rows(self, table: str, engine: str, partition: str) -> Iterator[RowWriter]:
        """Write one partition, replacing what an earlier try wrote there."""
        if table not in TABLES:
            raise KeyError(f"unknown table {table!r}")
        d = self.path / "tables" / table / engine
        d.mkdir(parents=True, exist_ok=True)
        with open(d / f"{partition}.jsonl", "w", encoding="utf-8") as fh:
            yield RowWriter(fh)

    def read_rows(self, table: str, engine: str | None = None) -> list[dict[str, Any]]:
        base = self.path / "tables" / table
        files = sorted(base.glob(f"{engine or '*'}/*.jsonl"))
        rows: list[dict[str, Any]] = []
        for f in files:
            with open(f, encoding="utf-8") as fh:
                for line in fh:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue  # a line torn by a crash mid-write: the request was in flight
        return rows

    def frame(self, table: str, engine: str | None = None) -> pd.DataFrame:
        from tasks.tables import to_frame

        return to_frame(table, self.read_rows(table, engine))

    def write_json(self, name: str, doc: Any) -> Path:
        p = self.path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=True, default=_json_default), encoding="utf-8")
        tmp.replace(p)
        return p

    def read_json(self, name: str, default: Any = None) -> Any:
        p = self.path / name
        if not p.exists():
            return default
        return json.loads(p.read_text(encoding="utf-8"))
