"""A table partition's rows: written as a task's transaction (a local file appended row by row, or
S3 chunks under a try of its own), and read back from the try that counts. Where and what a crash
loses: docs/deploy.md ("Run state in S3") and docs/PROTOCOL.md section 8.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tasks.core.pipes import FLUSH_EVERY_S, FRAME, PickleFeed, read_frames, spawn_python
from tasks.state.object_store import LocalStore, S3Store, Store

_WRITER_NICE = 10  # the loop's thread wins the core when both want it; the writer still gets ~10%
# An S3 chunk: what a crash can lose beyond the requests in flight. At most a PUT a second per
# partition at low rates, and chunks of some 0.5-1 MB of request rows at high ones.
CHUNK_ROWS = 256
CHUNK_EVERY_S = 1.0
TRY_POINTER = "try.json"  # in S3, the partition's current try: {"try": "try-..."}


# ---- where a partition's rows go ---------------------------------------------------------------


class _FileSink:
    """Rows appended to a partition file, flushed before add() returns."""

    buffers = False

    def __init__(self, fh: IO[str]):
        self._fh = fh

    def add(self, lines: list[str]) -> None:
        if lines:
            self._fh.write("".join(lines))
            self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class ChunkSink:
    """Rows stored as chunk objects `<prefix>000001.jsonl`, ...: a chunk is stored when it holds
    `max_rows` rows or its first row is `max_age_s` old (a timer thread of its own), and at close.
    A failed put is raised by the next add() or by close()."""

    buffers = True

    def __init__(self, store: Store, prefix: str, max_rows: int = CHUNK_ROWS, max_age_s: float = CHUNK_EVERY_S):
        self._store, self._prefix = store, prefix
        self._max_rows, self._max_age_s = max_rows, max_age_s
        self._lines: list[str] = []
        self._since: float | None = None  # when the oldest row still held arrived
        self._chunks = 0
        self._closing = False
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._timer = threading.Thread(target=self._age_out, name="dayone-chunk-timer", daemon=True)
        self._timer.start()

    def add(self, lines: list[str]) -> None:
        self._raise()
        if not lines:
            return
        with self._cond:
            if not self._lines:
                self._since = time.monotonic()
                self._cond.notify()
            self._lines += lines
            while len(self._lines) >= self._max_rows:
                self._store_chunk(self._max_rows)

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._timer.join()
        self._raise()
        with self._cond:
            self._store_chunk(len(self._lines))

    def _store_chunk(self, n: int) -> None:
        """Store the first `n` rows held (the caller holds the lock)."""
        if not n:
            return
        self._chunks += 1
        self._store.put(f"{self._prefix}{self._chunks:06d}.jsonl", "".join(self._lines[:n]).encode())
        del self._lines[:n]
        if not self._lines:
            self._since = None

    def _age_out(self) -> None:
        with self._cond:
            while not self._closing:
                if self._since is None:
                    self._cond.wait()
                    continue
                left = self._since + self._max_age_s - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                try:
                    self._store_chunk(len(self._lines))
                except BaseException as exc:  # raised on the writing thread at its next add
                    self.error = exc
                    return

    def _raise(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"storing rows failed: {self.error!r}") from self.error


class _LocalPartition:
    """A partition file on this machine, emptied when a try opens it."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        open(path, "w", encoding="utf-8").close()

    def sink(self) -> _FileSink:
        return _FileSink(open(self.path, "a", encoding="utf-8"))  # appending: a writer process may too

    def spec(self) -> tuple[Any, ...]:
        return ("local", str(self.path))


class _S3Partition:
    """One try of a partition in S3: chunks under `<partition>/<try>/`, each writer (this process,
    then a writer process, then this process again) a segment of its own, `<segment>-<chunk>`, so
    the keys sort in the order the rows were written."""

    def __init__(self, store: S3Store, base: str):
        self._store, self._base = store, base
        earlier = store.keys(base + "/")
        self.token = f"try-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
        pointer = f"{base}/{TRY_POINTER}"
        store.put(pointer, json.dumps({"try": self.token}).encode())
        # Readers follow the pointer from here on; an earlier try's chunks (a killed try's too) go.
        store.delete(k for k in earlier if k != pointer)
        self._segments = 0

    def _next_prefix(self) -> str:
        self._segments += 1
        return f"{self._base}/{self.token}/{self._segments:04d}-"

    def sink(self) -> ChunkSink:
        return ChunkSink(self._store, self._next_prefix())

    def spec(self) -> tuple[Any, ...]:
        return ("s3", self._store.spec(), self._next_prefix())


def open_sink(spec: tuple[Any, ...]) -> _FileSink | ChunkSink:
    """A partition's sink in another process, from the partition's spec()."""
    if spec[0] == "local":
        return _FileSink(open(spec[1], "a", encoding="utf-8"))
    store = S3Store(*spec[1])
    _ = store.client  # boto3 imported and its client built now, before the round, not during it
    return ChunkSink(store, spec[2])


class RowWriter:
    """A partition's rows as JSON lines: on this machine each write is flushed before it returns;
    in S3 it is stored with its chunk (CHUNK_ROWS rows or CHUNK_EVERY_S)."""

    def __init__(self, partition: _LocalPartition | _S3Partition):
        self._partition = partition
        self._sink: _FileSink | ChunkSink | None = None
        self.count = 0

    def write(self, row: dict[str, Any]) -> None:
        if self._sink is None:
            self._sink = self._partition.sink()
        self._sink.add([json.dumps(row, default=json_default) + "\n"])
        self.count += 1

    @contextmanager
    def off_loop(self, flush_every_s: float = FLUSH_EVERY_S) -> Iterator[QueuedRows]:
        """Rows taken where streams are being timed, written by a process (see QueuedRows); all
        of them are stored when the block ends, also when it raises. Rows write() holds are stored
        first (in the rounds there are none), so the process's rows follow every row written so far."""
        if self._sink is not None and self._sink.buffers:
            self._sink.close()
            self._sink = None
        queued = QueuedRows(self._partition.spec(), flush_every_s)
        try:
            yield queued
        finally:
            self.count += queued.close()

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None


class QueuedRows:
    """write() only queues the row (a PickleFeed): no JSON encoding and no I/O on the timing loop's
    thread, so a wave of completions does not hold up the reads of the streams still running.
    Every `flush_every_s` the rows go down a pipe to a writer process at nice +10, which encodes
    them as JSON (300 us for a row of 256 tokens, all of it away from the loop's process and its
    GIL) and hands them to the partition's sink: appended to the partition file in one flushed
    write, or, in S3, stored with their chunk.

    Loss on a crash (kill -9 of the worker's process group): the requests in flight, the rows
    queued in the last `flush_every_s` (50 ms), a batch the writer process has received but not yet
    been given a core to write (none while it gets ~10% of one), and in S3 the chunk not yet stored
    (fewer than CHUNK_ROWS rows, none held longer than CHUNK_EVERY_S); on disk at most one line torn.
    A writer that fails (a row JSON cannot encode, a store that refuses) fails the round at the next
    write or at close.
    """

    def __init__(self, spec: tuple[Any, ...], flush_every_s: float):
        self._proc = spawn_python("from tasks.state.partitions import _write_piped_rows; _write_piped_rows()",
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self._proc.stdin is not None
        # Where to write goes down the pipe, not on the command line: it may hold S3 credentials.
        data = pickle.dumps(spec, pickle.HIGHEST_PROTOCOL)
        try:
            self._proc.stdin.write(FRAME.pack(len(data)) + data)
            self._proc.stdin.flush()
        except OSError:
            pass  # the process died: said below
        # Started, importing and connected before the first stream is timed, not while the first are.
        if self._proc.stdout is None or self._proc.stdout.readline() != b"ready\n":
            self._proc.kill()
            raise RuntimeError(f"the row writer process did not start: {self._stderr()}")
        self._feed = PickleFeed(self._proc.stdin, flush_every_s, "dayone-row-feeder")

    def write(self, row: dict[str, Any]) -> None:
        if self._feed.error is not None:
            raise RuntimeError(f"the row writer failed: {self._stderr() or self._feed.error!r}") from self._feed.error
        self._feed.put(row)

    def close(self) -> int:
        """Hand over the rest, wait until it is stored, and return how many rows were written."""
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
    """The writer process of QueuedRows: the partition's spec, then batches of pickled rows on
    stdin, each encoded as JSON lines and handed to the partition's sink in one piece. At the end
    of its input (the round is over, or the worker died) it stores what it has and exits."""
    os.nice(_WRITER_NICE)
    frames = read_frames(sys.stdin.buffer)
    sink = open_sink(next(frames))
    print("ready", flush=True)
    batch: list[str] = []
    for row in frames:
        if row is not None:
            batch.append(json.dumps(row, default=json_default) + "\n")
            continue
        sink.add(batch)
        batch = []
    sink.add(batch)
    sink.close()


def json_default(value: Any) -> Any:
    """json.dumps' default for what rows and documents carry beyond JSON's types."""
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _parse_lines(text: str, into: list[dict[str, Any]]) -> None:
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            into.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line torn by a crash mid-write: the request was in flight


# ---- a table's partitions in a run's store -------------------------------------------------------


def partition_writer(store: Store, table: str, engine: str, partition: str) -> RowWriter:
    """A writer of one partition (`tables/<table>/<engine>/<partition>`), replacing what an earlier try wrote there."""
    if isinstance(store, LocalStore):
        return RowWriter(_LocalPartition(store.root / "tables" / table / engine / f"{partition}.jsonl"))
    return RowWriter(_S3Partition(store, f"tables/{table}/{engine}/{partition}"))


def read_partitions(store: Store, table: str, engine: str | None = None) -> list[dict[str, Any]]:
    """Every row of the table's partitions (one engine's, or all), in partition order; in S3 only the
    try each partition points at."""
    rows: list[dict[str, Any]] = []
    if isinstance(store, LocalStore):
        for f in sorted((store.root / "tables" / table).glob(f"{engine or '*'}/*.jsonl")):
            with open(f, encoding="utf-8") as fh:
                _parse_lines(fh.read(), rows)
        return rows
    base = f"tables/{table}/"
    partitions: dict[tuple[str, str], list[str]] = {}
    for key in store.keys(base + (f"{engine}/" if engine else "")):
        parts = key[len(base):].split("/", 2)
        if len(parts) == 3:
            partitions.setdefault((parts[0], parts[1]), []).append(parts[2])
    for e, p in sorted(partitions, key=lambda ep: (ep[0], ep[1] + ".jsonl")):  # as the files sort
        names, where = partitions[(e, p)], f"{base}{e}/{p}/"
        current = _current_try(store, where, names)
        for name in sorted(n for n in names if n.startswith(current + "/")):
            data = store.get(where + name)
            if data is not None:  # deleted since listed: a newer try replaced this one
                _parse_lines(data.decode("utf-8"), rows)
    return rows


def _current_try(store: Store, where: str, names: list[str]) -> str:
    if TRY_POINTER in names:
        doc = json.loads(store.get(where + TRY_POINTER) or b"{}")
        if doc.get("try"):
            return doc["try"]
    tries = sorted({n.split("/", 1)[0] for n in names if "/" in n})  # try-<UTC time>-...: the latest
    return tries[-1] if tries else ""
