"""While streams are timed, another thread running Python (the row feed, a metrics scrape) may not
hold the event loop off for CPython's default 5 ms switch interval: every read the loop stamps late
would be late by up to that much."""

from __future__ import annotations

import asyncio
import threading
import time

from cpu_wait import ATTEMPTS, LOADED, runqueue_wait_s
from tasks.load.client import run_async, timing_window
from tasks.stats.figures import median



def _lateness_ms(inside_window: bool) -> tuple[list[float], float]:
    """How late 1 ms sleeps on the loop wake up while a thread spins in Python bytecode, and the share of
    the probe the loop's thread spent waiting for a core (runnable, not running: the machine's load, not
    the GIL, for which the thread sleeps)."""
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    async def probe() -> tuple[list[float], float]:
        late = []
        waited0, t0 = runqueue_wait_s(), time.perf_counter()
        for _ in range(200):
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append((time.perf_counter() - t - 0.001) * 1e3)
        return late, (runqueue_wait_s() - waited0) / (time.perf_counter() - t0)

    async def main() -> tuple[list[float], float]:
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
    """On a loaded machine the loop's thread also waits for a core, inside the window as outside: a try
    in which it waited more than LOADED of the time, and missed a bound, is run again, up to ATTEMPTS in
    all, and the least loaded one is judged. Without the short switch interval every try misses."""
    tries = []
    for attempt in range(ATTEMPTS):
        (outside, out_waited), (inside, in_waited) = _lateness_ms(False), _lateness_ms(True)
        outside, inside, waited = median(outside), median(inside), max(out_waited, in_waited)
        print(f"median wake-up lateness beside a spinning thread: {outside:.2f} ms by default, {inside:.2f} ms "
              f"timing; the loop waited for a core {100 * waited:.0f}% of the time")
        tries.append((waited, attempt, outside, inside))
        if waited < LOADED or (outside > 3.0 and inside < min(2.5, outside / 2)):
            break
    _, _, outside, inside = min(tries)
    assert outside > 3.0  # the default switch interval: the test sees the stall it guards against
    # 0.4 ms measured here; the bound leaves room for a busy suite taking the core now and then
    assert inside < min(2.5, outside / 2)


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_after_the_window_the_round_s_cycles_are_collected_and_the_old_heap_is_not_scanned():
    """A full collection of a worker's heap (Airflow, pandas, Great Expectations) took about a second after
    every round; the round's own reference cycles are young, and a young collection frees them."""
    import gc
    import weakref

    collected: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            collected.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        with timing_window():
            cycle = weakref.ref(_Cycle())  # unreachable at once, freed only by the collector
            assert cycle() is not None and collected == []  # no collection while timed
    finally:
        gc.callbacks.remove(seen)
    assert cycle() is None, "the round's reference cycle outlived the window"
    assert collected and max(collected) < 2, f"generations collected after the window: {collected}"
