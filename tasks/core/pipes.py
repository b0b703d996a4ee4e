"""Objects handed to a child Python process over a pipe: start it, feed it, read what it wrote.

Used where a timing loop must not encode or write (the load client's shards, a partition's writer
process): the loop only queues, a thread of its own does the rest (docs/PROTOCOL.md section 8). Pickle
only between a process and the children it started; what crosses a network is signed and typed
(tasks/core/signed_link.py), never unpickled.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

# How often objects queued on a timing loop are handed over (a Feed): the most a crash can
# lose beyond the requests in flight, and few enough hand-overs (20 a second) to cost nothing.
FLUSH_EVERY_S = 0.05
FRAME = struct.Struct("<I")  # a pickled object's length; 0 ends a batch


def pickle_frame(obj: Any) -> bytes:
    """One object as read_frames reads it: its pickle's length, then the pickle."""
    data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
    return FRAME.pack(len(data)) + data


class Feed:
    """Objects queued on one thread, handed to a binary pipe by a thread of its own.

    put() is a deque append: the queueing thread (an event loop timing streams) does no encoding
    and no I/O. Every `every_s` the feed's thread encodes what has queued, one object at a time as
    `frame(obj)` (about 10 us for a request row; the thread lets go of the GIL between objects and
    during the write), and writes the frames and `batch_end` in one write. A failure (the reader
    died) is raised by the next put() or by close().
    """

    def __init__(self, pipe: IO[bytes], every_s: float, name: str, frame: Callable[[Any], bytes],
                 batch_end: bytes = b""):
        self._pipe, self._every, self._frame, self._batch_end = pipe, every_s, frame, batch_end
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
            frames.append(self._frame(self._queue.popleft()))
            time.sleep(0)  # the GIL to the timing loop, if it waits: one object's encoding at a time
        if frames:
            self._pipe.write(b"".join(frames) + self._batch_end)
            self._pipe.flush()
            self.sent += len(frames)


class PickleFeed(Feed):
    """A Feed to a child process: pickled frames, each batch closed by an empty frame (read_frames)."""

    def __init__(self, pipe: IO[bytes], every_s: float, name: str):
        super().__init__(pipe, every_s, name, pickle_frame, FRAME.pack(0))


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
    code_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (code_root, os.environ.get("PYTHONPATH"))))}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, **popen)
