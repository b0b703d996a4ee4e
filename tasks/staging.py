"""The run's working directory: where each step writes its own partition of each table.

A task is a transaction: it owns its partitions (engine x scenario) and rewrites them whole on a
retry, so a retried task never duplicates or mixes rows. Rows are appended and flushed as they
complete, so a crash of the worker loses at most the requests in flight. Rows taken on an event
loop that times streams (`RowWriter.off_loop`) are encoded and written by a writer process
instead, every 50 ms: a crash there loses at most the requests in flight and the rows of the
last 50 ms (see QueuedRows).
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tasks.tables import TABLES

if TYPE_CHECKING:
    import pandas as pd


def default_root() -> Path:
    return Path(os.environ.get("DAYONE_WORKDIR", Path.home() / ".dayone" / "work"))


# How often rows queued on a timing loop are handed to the writer process: the most a crash can
# lose beyond the requests in flight, and few enough hand-overs (20 a second) to cost nothing.
FLUSH_EVERY_S = 0.05
_FRAME = struct.Struct("<I")  # a pickled row's length; 0 ends a batch
_WRITER_NICE = 10  # the loop's thread wins the core when both want it; the writer still gets ~10%


class RowWriter:
    """A partition's rows as JSON lines, each write flushed before it returns."""

    def __init__(self, fh: IO[str], path: Path):
        self._fh = fh  # opened for appending: a writer process may append to the same file
        self._path = path
        self.count = 0

    def write(self, row: dict[str, Any]) -> None:
        self._fh.write(json.dumps(row, default=_json_default) + "\n")
        self._fh.flush()
        self.count += 1

    @contextmanager
    def off_loop(self, flush_every_s: float = FLUSH_EVERY_S) -> Iterator[QueuedRows]:
        """Rows taken where streams are being timed, written by a process (see QueuedRows); all
        of them are in the file when the block ends, also when it raises. (write() leaves nothing
        buffered here, so the process appends after every row written so far.)"""
        queued = QueuedRows(self._path, flush_every_s)
        try:
            yield queued
        finally:
            self.count += queued.close()


class QueuedRows:
    """write() only appends the row to a queue: no JSON encoding and no file I/O on the timing
    loop's thread, so a wave of completions does not hold up the reads of the streams still
    running. Every `flush_every_s` a thread pickles what has queued (about 10 us a row, the GIL
    released between rows) and pipes it to a writer process at nice +10, which encodes it as
    JSON (300 us for a row of 256 tokens, all of it away from the loop's process and its GIL)
    and appends it to the partition file in one flushed write.

    Loss on a crash (kill -9 of the worker's process group): the requests in flight, the rows
    queued in the last `flush_every_s` (50 ms), and a batch the writer process has received but
    not yet been given a core to write (none while it gets ~10% of one); at most one line torn.
    A writer that fails (a row JSON cannot encode) fails the round at the next write or at close.
    """

    def __init__(self, path: Path, flush_every_s: float):
        self._every = flush_every_s
        self._queue: deque[dict[str, Any]] = deque()  # append and popleft are thread-safe
        self._sent = 0
        self._error: BaseException | None = None
        code_root = str(Path(__file__).resolve().parent.parent)  # this checkout's tasks package
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from tasks.staging import _write_piped_rows; _write_piped_rows()", str(path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (code_root, os.environ.get("PYTHONPATH"))))},
        )
        # Started and importing before the first stream is timed, not while the first are.
        if self._proc.stdout is None or self._proc.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the row writer process did not start: {self._stderr()}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dayone-row-feeder", daemon=True)
        self._thread.start()

    def write(self, row: dict[str, Any]) -> None:
        if self._error is not None:
            raise RuntimeError(f"the row writer failed: {self._stderr() or self._error}") from self._error
        self._queue.append(row)

    def close(self) -> int:
        """Hand over the rest, wait until it is written, and return how many rows were written."""
        self._stop.set()
        self._thread.join()
        code = self._proc.wait()
        if self._error is not None or code != 0:
            raise RuntimeError(f"the row writer failed (exit {code}): {self._stderr() or self._error}")
        return self._sent

    def _stderr(self) -> str:
        if self._proc.poll() is None or self._proc.stderr is None:
            return ""
        return self._proc.stderr.read().decode("utf-8", "replace")[-2000:]

    def _run(self) -> None:
        pipe = self._proc.stdin
        assert pipe is not None
        try:
            while not self._stop.wait(self._every):
                self._hand_over(pipe)
            self._hand_over(pipe)
        except BaseException as exc:  # raised on the loop's thread at its next write or at close
            self._error = exc
        finally:
            try:
                pipe.close()
            except OSError:
                pass

    def _hand_over(self, pipe: IO[bytes]) -> None:
        frames = []
        while self._queue:
            data = pickle.dumps(self._queue.popleft(), pickle.HIGHEST_PROTOCOL)
            frames += (_FRAME.pack(len(data)), data)
        if frames:
            pipe.write(b"".join(frames) + _FRAME.pack(0))
            pipe.flush()
            self._sent += len(frames) // 2


def _write_piped_rows() -> None:
    """The writer process of QueuedRows: batches of pickled rows on stdin, each appended to the
    file named by argv[1] as JSON lines in one flushed write. At the end of its input (the round
    is over, or the worker died) it writes what it has and exits."""
    os.nice(_WRITER_NICE)
    source = sys.stdin.buffer
    with open(sys.argv[1], "a", encoding="utf-8") as fh:
        print("ready", flush=True)
        batch: list[str] = []
        while len(head := source.read(_FRAME.size)) == _FRAME.size:
            (size,) = _FRAME.unpack(head)
            if size:
                data = source.read(size)
                if len(data) < size:
                    break  # the worker died mid-row
                batch.append(json.dumps(pickle.loads(data), default=_json_default) + "\n")
                continue
            fh.write("".join(batch))
            fh.flush()
            batch = []
        fh.write("".join(batch))


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
        path = d / f"{partition}.jsonl"
        with open(path, "a", encoding="utf-8") as fh:  # appending: see RowWriter.off_loop
            fh.truncate(0)
            yield RowWriter(fh, path)

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
