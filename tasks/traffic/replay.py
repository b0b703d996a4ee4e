"""Open-loop replay of a schedule that is streamed, not listed: each request is built just before it is due,
sent at its time whatever is in flight, and its lateness (sent - due) recorded. Memory holds the requests in
flight, never the schedule (tasks/load/client.py's run_open_loop takes a whole list)."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tasks.engines.base import EngineAdapter
from tasks.load.client import RequestResult, RequestSpec, send_request, timing_window
from tasks.load.http import StreamSession

# uvloop's timers fire on a millisecond clock: a sleep wakes up to a millisecond late. The last SPIN_S
# before a send are waited by yielding to the loop (its reads still run), on perf_counter.
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


OnReplayed = Callable[[RequestResult, float], object]  # the result and its due time (Unix time)


async def replay(session: StreamSession, base_url: str, schedule: Iterable[Due], adapter: EngineAdapter,
                 timeout_s: float, on_result: OnReplayed) -> tuple[int, int]:
    """Send each request of `schedule` (offsets non-decreasing) at its time; `on_result(result, due_ts)` takes
    each completed request (lateness = result.send_ts - due_ts). Returns the requests sent and the most that
    were in flight at once (what the replay's memory grows with: a server or client that falls behind)."""
    clock = time.perf_counter
    in_flight: set[asyncio.Task[None]] = set()

    async def one(spec: RequestSpec, due_ts: float) -> None:
        r = await send_request(session, base_url, spec, adapter, timeout_s)
        on_result(r, due_ts)

    sent = uncollected = peak = 0
    with timing_window():
        start, start_wall = clock(), time.time()
        for item in schedule:  # the next request is built here, while the previous ones stream
            due = start + item.offset_s
            if uncollected >= COLLECT_FORCED or (uncollected >= COLLECT_EVERY
                                                 and due - clock() > COLLECT_GAP_S + SPIN_S):
                gc.collect()
                uncollected = 0
            wait = due - clock() - SPIN_S
            if wait > 0:
                await asyncio.sleep(wait)
            while clock() < due:
                await asyncio.sleep(0)
            task = asyncio.ensure_future(one(item.spec, start_wall + item.offset_s))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            peak = max(peak, len(in_flight))
            sent += 1
            uncollected += 1
            await asyncio.sleep(0)  # the task writes its request now, before the next one is built
        while in_flight:
            await asyncio.gather(*list(in_flight))
    return sent, peak
