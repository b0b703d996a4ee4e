"""One precise timer per server process.

asyncio's (and uvloop's) timers round to the millisecond. Streamed events must leave within a
fraction of a millisecond of their scheduled time, so all waits go through one Linux timerfd
armed for the earliest deadline (epoll wakes the loop when it fires, with microsecond accuracy).
Where timerfd is missing, it falls back to loop.call_at.
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import os
import time
from collections.abc import Callable
from typing import Any

_CLOCK_MONOTONIC = 1  # time.monotonic() reads CLOCK_MONOTONIC on Linux
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1
_EARLY_S = 20e-6  # run what is due within this much of now in the same wake-up


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _timerfd() -> tuple[int, Callable[[float], None]] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    settime = libc.timerfd_settime
    spec = _Itimerspec()
    ref = ctypes.byref(spec)

    def arm(when: float) -> None:
        sec = int(when)
        spec.it_value.tv_sec = sec
        spec.it_value.tv_nsec = int((when - sec) * 1e9) or 1  # all zero would disarm it
        settime(fd, _TFD_TIMER_ABSTIME, ref, None)

    return fd, arm


class PreciseTimer:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._heap: list[tuple[float, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = 0
        self._armed_for: float | None = None
        made = _timerfd()
        self.precise = made is not None
        if made:
            self._fd, self._arm_fd = made
            loop.add_reader(self._fd, self._fire)
        self._handle: asyncio.TimerHandle | None = None

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any) -> None:
        """Run callback(*args) at monotonic time `when`."""
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, callback, args))
        if self._armed_for is None or when < self._armed_for:
            self._arm(when)

    async def sleep_until(self, when: float) -> None:
        if when - time.monotonic() <= _EARLY_S:
            return
        fut = self._loop.create_future()
        self.call_at(when, _wake, fut)
        await fut

    def _arm(self, when: float) -> None:
        self._armed_for = when
        if self.precise:
            self._arm_fd(when)
        else:
            if self._handle:
                self._handle.cancel()
            self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        if self.precise:
            try:
                os.read(self._fd, 8)
            except BlockingIOError:
                pass
        self._armed_for = None
        heap = self._heap
        now = time.monotonic() + _EARLY_S
        while heap and heap[0][0] <= now:
            _, _, callback, args = heapq.heappop(heap)
            try:
                callback(*args)
            except Exception as exc:  # noqa: BLE001 - one bad callback must not stop the clock
                self._loop.call_exception_handler({"message": "PreciseTimer callback failed", "exception": exc})
        if heap:
            self._arm(heap[0][0])

    def close(self) -> None:
        if self.precise:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
