"""Open-loop replay of a schedule that is streamed, not listed (a request trace): the requests arrive already
built, each with its time, and the loop only waits for that time, stamps and sends. Memory holds what is
queued ahead and in flight, never the schedule (client.py's run_open_loop takes a whole list).

Run in a client process of tasks/load/shards.py (`run_streamed`): the parent reads the schedule and builds
each request there, off this loop, and hands each shard its own ahead of their times (PROTOCOL.md section 4,
"Keeping the trace's schedule")."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from tasks.engines.base import EngineAdapter
from tasks.load.client import RequestResult, RequestSpec, send_request, timing_window
from tasks.load.http import StreamSession

# Without a timerfd (not Linux): uvloop's timers fire on a millisecond clock, so a sleep wakes up to a
# millisecond late; the last SPIN_S before a send are waited by yielding to the loop (its reads still run).
SPIN_S = 0.002
# The timing window turns the collector off; a long replay would keep every request's reference cycles. They
# are collected in a gap of the schedule (the heap before the replay is frozen: a collection sees only what the
# replay made), or, with no such gap, after COLLECT_FORCED requests whatever the schedule (bench/RESULTS.md).
COLLECT_EVERY, COLLECT_GAP_S, COLLECT_FORCED = 2000, 0.005, 20000


@dataclass(frozen=True)
class Due:
    """A request of the schedule: when it is due (seconds after the replay's start) and what it sends."""

    offset_s: float
    spec: RequestSpec


class _SchedAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                ("nice", ctypes.c_int32), ("priority", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64), ("util_min", ctypes.c_uint32),
                ("util_max", ctypes.c_uint32)]


_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}
# Where the process may not ask for real-time priority: the slice its threads ask of the scheduler (Linux >= 6.12,
# EEVDF). A task with a short slice has an early deadline, so it may preempt the task on its core when it wakes,
# where with the default (3 ms) it waits for that task's slice on a busy core. Any process may ask it for its own
# threads: it gives them no more CPU.
TIMING_SLICE_NS = 100_000


def timing_priority() -> str:
    """Ask the scheduler to run the calling thread, and the threads it starts after, as soon as they wake: the
    lowest real-time priority (SCHED_FIFO 1) where this process may (root, CAP_SYS_NICE, RLIMIT_RTPRIO), else a
    short slice. A load client sleeps between sends, so this costs others only the little CPU it uses, at the
    moment it needs it; without it, on a busy machine, a send waits for a core for milliseconds (bench/RESULTS.md,
    "Trace replay in the pipeline"). Returns what was granted: "realtime", "short slice" or "none"."""
    import platform

    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return "realtime"
    except (OSError, AttributeError):  # not permitted (or not Linux): the slice, which any process may ask
        pass
    number = _SCHED_SETATTR.get(platform.machine())
    if number is None:
        return "none"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        attr = _SchedAttr(ctypes.sizeof(_SchedAttr), os.sched_getscheduler(0), 0, os.getpriority(os.PRIO_PROCESS, 0),
                          0, TIMING_SLICE_NS, 0, 0, 0, 0)
        return "short slice" if libc.syscall(number, 0, ctypes.byref(attr), 0) == 0 else "none"
    except (OSError, AttributeError):
        return "none"


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_CLOCK_MONOTONIC, _TFD_TIMER_ABSTIME = 1, 1


class Deadline:
    """Waits on the running loop until a moment of time.monotonic(): a Linux timerfd (nanosecond timer) the
    loop watches, so the loop sleeps until the moment and wakes within tens of microseconds of it. A wait that
    spins instead (yielding until the moment) keeps the process busy, and on a shared core the scheduler then
    lets others run for milliseconds in the middle of it (bench/RESULTS.md, "Trace replay in the pipeline")."""

    def __init__(self) -> None:
        self._fd: int | None = None
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            self._settime = libc.timerfd_settime
            fd = libc.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):  # no timerfd: sleep, then spin the last SPIN_S
            return
        self._fd = fd if fd >= 0 else None

    @property
    def precise(self) -> bool:
        return self._fd is not None

    async def until(self, moment: float) -> None:
        clock = time.monotonic
        if moment <= clock():
            return
        if self._fd is None:
            wait = moment - clock() - SPIN_S
            if wait > 0:
                await asyncio.sleep(wait)
            while clock() < moment:
                await asyncio.sleep(0)
            return
        sec = int(moment)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(sec, int((moment - sec) * 1e9)))
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime")
        loop = asyncio.get_running_loop()
        fired = loop.create_future()

        def on_fire() -> None:
            try:
                os.read(self._fd, 8)  # type: ignore[arg-type]
            except BlockingIOError:
                return
            if not fired.done():
                fired.set_result(None)

        loop.add_reader(self._fd, on_fire)
        try:
            await fired
        finally:
            loop.remove_reader(self._fd)
        while clock() < moment:  # never early
            await asyncio.sleep(0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


async def replay(session: StreamSession, base_url: str, schedule: asyncio.Queue[Due | None], start_mono: float,
                 adapter: EngineAdapter, timeout_s: float,
                 on_result: Callable[[RequestResult], object]) -> tuple[int, int]:
    """Send each request taken from `schedule` (offsets non-decreasing, None at its end) at start_mono + its
    offset (time.monotonic()); `on_result` takes each completed request. A request not yet queued when it is
    due is sent when it arrives, and its lateness shows it. Returns the requests sent and the most that were in
    flight at once (what the replay's memory grows with: a server or client that falls behind)."""
    clock = time.monotonic
    in_flight: set[asyncio.Task[None]] = set()
    deadline = Deadline()

    async def one(spec: RequestSpec) -> None:
        on_result(await send_request(session, base_url, spec, adapter, timeout_s))

    sent = uncollected = peak = 0
    try:
        with timing_window():
            while (item := await schedule.get()) is not None:
                due = start_mono + item.offset_s
                if uncollected >= COLLECT_FORCED or (uncollected >= COLLECT_EVERY
                                                     and due - clock() > COLLECT_GAP_S + SPIN_S):
                    gc.collect()
                    uncollected = 0
                await deadline.until(due)
                task = asyncio.ensure_future(one(item.spec))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                peak = max(peak, len(in_flight))
                sent += 1
                uncollected += 1
                await asyncio.sleep(0)  # the task writes its request now
            while in_flight:
                await asyncio.gather(*list(in_flight))
    finally:
        deadline.close()
    return sent, peak
