"""While streams are timed, another thread running Python (the row feed, a metrics scrape) may not
hold the event loop off for CPython's default 5 ms switch interval: every read the loop stamps late
would be late by up to that much."""

from __future__ import annotations

import asyncio
import threading
import time

from tasks.load.client import run_async, timing_window
from tasks.load.stats import median


def _lateness_ms(inside_window: bool) -> list[float]:
    """How late 1 ms sleeps on the loop wake up while a thread spins in Python bytecode."""
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    async def probe() -> list[float]:
        late = []
        for _ in range(200):
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append((time.perf_counter() - t - 0.001) * 1e3)
        return late

    async def main() -> list[float]:
        if inside_window:
            with timing_window():
                return await probe()
        return await probe()

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        return run_async(main())
    finally:
        stop.set()
        thread.join()


def test_a_busy_thread_holds_the_timing_loop_off_for_at_most_a_fraction_of_a_millisecond():
    outside, inside = median(_lateness_ms(False)), median(_lateness_ms(True))
    print(f"median wake-up lateness beside a spinning thread: {outside:.2f} ms by default, {inside:.2f} ms timing")
    assert outside > 3.0  # the default switch interval: the test sees the stall it guards against
    # 0.4 ms measured here; the bound leaves room for a busy suite taking the core now and then
    assert inside < min(2.5, outside / 2)
