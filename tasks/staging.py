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


# How often objects queued on a timing loop are handed over (PickleFeed): the most a crash can
# lose beyond the requests in flight, and few enough hand-overs (20 a second) to cost nothing.
FLUSH_EVERY_S = 0.05
FRAME = struct.Struct("<I")  # a pickled object's length; 0 ends a batch
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


class PickleFeed:
    """Objects queued on one thread, handed to a binary pipe by a thread of its own.

    put() is a deque append: the queueing thread (an event loop timing streams) does no encoding
    and no I/O. Every `every_s` the feed's thread pickles what has queued, one object at a time
    (about 10 us for a request row; the GIL is free between objects and during the write), and
    writes it as length-prefixed frames closed by an empty frame, in one write. A failure (the
    reader died) is raised by the next put() or by close().
    """

    def __init__(self, pipe: IO[bytes], every_s: float, name: str):
        self._pipe, self._every = pipe, every_s
        self._queue: deque[Any] = deque()  # append and popleft are thread-safe
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, obj: Any) -> None:
        if self.error is not None:
            raise RuntimeError(f"{self._thread.name} failed: {self.error!r}") from self.error
        self._queue.append(obj)

    def close(self) -> int:
        """Hand over the rest and close the pipe; how many objects were handed over."""
        self._stop.set()
        self._thread.join()
        return self.sent

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._every):
                self._hand_over()
            self._hand_over()
        except BaseException as exc:  # raised on the queueing thread at its next put
            self.error = exc
        finally:
            try:
                self._pipe.close()
            except OSError:
                pass

    def _hand_over(self) -> None:
        frames = []
        while self._queue:
            data = pickle.dumps(self._queue.popleft(), pickle.HIGHEST_PROTOCOL)
            frames += (FRAME.pack(len(data)), data)
        if frames:
            self._pipe.write(b"".join(frames) + FRAME.pack(0))
            self._pipe.flush()
            self.sent += len(frames) // 2


def read_frames(source: IO[bytes]) -> Iterator[Any]:
    """What a PickleFeed wrote: each object, and None at the end of each batch; stops at the end
    of the input or at a frame cut short (the writing process died)."""
    while len(head := source.read(FRAME.size)) == FRAME.size:
        (size,) = FRAME.unpack(head)
        if not size:
            yield None
            continue
        data = source.read(size)
        if len(data) < size:
            return
        yield pickle.loads(data)


def spawn_python(code: str, *args: str, **popen: Any) -> subprocess.Popen:
    """`python -c code args` importing this checkout's tasks package."""
    code_root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (code_root, os.environ.get("PYTHONPATH"))))}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, **popen)


class QueuedRows:
    """write() only queues the row (a PickleFeed): no JSON encoding and no file I/O on the timing
    loop's thread, so a wave of completions does not hold up the reads of the streams still
    running. Every `flush_every_s` the rows go down a pipe to a writer process at nice +10, which
    encodes them as JSON (300 us for a row of 256 tokens, all of it away from the loop's process
    and its GIL) and appends them to the partition file in one flushed write.

    Loss on a crash (kill -9 of the worker's process group): the requests in flight, the rows
    queued in the last `flush_every_s` (50 ms), and a batch the writer process has received but
    not yet been given a core to write (none while it gets ~10% of one); at most one line torn.
    A writer that fails (a row JSON cannot encode) fails the round at the next write or at close.
    """

    def __init__(self, path: Path, flush_every_s: float):
        self._proc = spawn_python("from tasks.staging import _write_piped_rows; _write_piped_rows()", str(path),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Started and importing before the first stream is timed, not while the first are.
        if self._proc.stdout is None or self._proc.stdout.readline() != b"ready\n":
            self._proc.kill()
            raise RuntimeError(f"the row writer process did not start: {self._stderr()}")
        assert self._proc.stdin is not None
        self._feed = PickleFeed(self._proc.stdin, flush_every_s, "dayone-row-feeder")

    def write(self, row: dict[str, Any]) -> None:
        if self._feed.error is not None:
            raise RuntimeError(f"the row writer failed: {self._stderr() or self._feed.error!r}") from self._feed.error
        self._feed.put(row)

    def close(self) -> int:
        """Hand over the rest, wait until it is written, and return how many rows were written."""
        sent = self._feed.close()
        code = self._proc.wait()
        if self._feed.error is not None or code != 0:
            raise RuntimeError(f"the row writer failed (exit {code}): {self._stderr() or self._feed.error!r}")
        return sent

    def _stderr(self) -> str:
        if self._proc.poll() is None or self._proc.stderr is None:
            return ""
        return self._proc.stderr.read().decode("utf-8", "replace")[-2000:]


def _write_piped_rows() -> None:
    """The writer process of QueuedRows: batches of pickled rows on stdin, each appended to the
    file named by argv[1] as JSON lines in one flushed write. At the end of its input (the round
    is over, or the worker died) it writes what it has and exits."""
    os.nice(_WRITER_NICE)
    with open(sys.argv[1], "a", encoding="utf-8") as fh:
        print("ready", flush=True)
        batch: list[str] = []
        for row in read_frames(sys.stdin.buffer):
            if row is not None:
                batch.append(json.dumps(row, default=_json_default) + "\n")
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
