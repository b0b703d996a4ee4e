"""A completion does no file I/O and no JSON encoding on the event loop that times the streams.

Measured against an independent server: a wave of completions, each encoding, writing and
flushing its row on the loop, held up the reads of the streams still running (inter-token errors
above 1 ms clustered in the streams' last gaps). Rows are now queued on the loop and encoded and
written by a writer process (tasks/state/partitions.py QueuedRows).

The round's partition file is opened through a stand-in whose first two flushes stall 0.3 s (a
disk that stalls), and JSON encoding in this process is watched: the old code did both on the
loop, for every completion, and the loop stalled 0.7 s; now neither happens on the loop, and a
5 ms timer on it is never late by 150 ms while 200 completions land (20-30 ms on this busy box),
not counting the time the loop's thread waited for a core (a loaded CI machine deschedules a process
for up to a second; the kernel counts that wait in /proc/thread-self/schedstat, and a loop held up by
its own work, or by another thread holding the GIL, is not waiting for a core).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from types import SimpleNamespace

import pytest

from tasks.state import partitions
from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.rounds import RoundPlan, run_round
from tasks.state.storage import RunDir

STALL_S, STALLS = 0.3, 2  # the partition's first two flushes take 0.3 s each: a disk that stalls
MAX_LOOP_STALL_S = 0.15  # a loaded machine delays the loop by tens of ms, not 150, its waits for a core taken out


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


class _StallingFile:
    """The partition file: records whether each call ran on a thread running an event loop."""

    def __init__(self, fh, calls: list[tuple[str, bool]]):
        self._fh, self._calls, self._stalls = fh, calls, STALLS

    def write(self, text: str) -> int:
        self._calls.append(("write", _on_event_loop()))
        return self._fh.write(text)

    def flush(self) -> None:
        self._calls.append(("flush", _on_event_loop()))
        if self._stalls:
            self._stalls -= 1
            time.sleep(STALL_S)
        self._fh.flush()

    def __getattr__(self, name: str):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._fh.close()


def test_completions_neither_encode_nor_write_on_the_timing_loop(ref_server, make_ctx, short, monkeypatch):
    calls: list[tuple[str, bool]] = []
    def stalling_open(path, mode="r", **kw):
        fh = open(path, mode, **kw)
        return fh if mode == "r" else _StallingFile(fh, calls)

    monkeypatch.setattr(partitions, "open", stalling_open, raising=False)
    encoded_on_loop = []

    def dumps(obj, **kw):
        encoded_on_loop.append(_on_event_loop())
        return json.dumps(obj, **kw)

    monkeypatch.setattr(partitions, "json", SimpleNamespace(dumps=dumps, loads=json.loads,
                                                            JSONDecodeError=json.JSONDecodeError))
    ctx = make_ctx(ref_server.url, "vllm", scenarios=short([50], rounds=1, requests=200, output=16))
    plan = RoundPlan(scenario="short", shape=Shape(32, 16, 50), round=1, requests=200, first_encounter=False)

    async def go():
        lags: list[tuple[float, float, float]] = []  # (tick start, Unix time; how late; of it, waiting for a core)
        done = asyncio.Event()

        async def probe() -> None:  # how late the loop runs a 5 ms timer, throughout the round
            schedstat = os.open("/proc/thread-self/schedstat", os.O_RDONLY)  # the loop's thread's
            try:
                while not done.is_set():
                    wall, t, waited = time.time(), time.perf_counter(), _runqueue_wait_s(schedstat)
                    await asyncio.sleep(0.005)
                    lag = time.perf_counter() - t - 0.005
                    lags.append((wall, lag, _runqueue_wait_s(schedstat) - waited))
            finally:
                os.close(schedstat)

        async with new_session() as session:
            task = asyncio.create_task(probe())
            with ctx.run_dir.rows("requests", "sim", "short") as out:
                outcome = await run_round(ctx, session, plan, out)
                in_round = len(calls), len(encoded_on_loop)
                out.write({"request_id": "after the round"})  # here, on the loop: the watch sees it
            done.set()
            await task
        return outcome, lags, in_round

    outcome, ticks, (io_calls, encodings) = run_async(go())
    assert outcome.row["requests_ok"] == 200
    # ticks while streams were timed: from the first send (not the round's set-up) until the last
    # stream ended (the round's end waits for the writer's last, maybe stalled, flush)
    first_send = min(r.send_ts for r in outcome.results)
    last_event = max(r.send_ts + r.e2e_s for r in outcome.results)
    timed = [(lag, waited) for start, lag, waited in ticks if first_send <= start and start + 0.005 + lag <= last_event]
    raw_lags = [lag for lag, _ in timed]
    lags = [lag - waited for lag, waited in timed]  # held up by the loop's process, not by the machine
    assert len(ctx.run_dir.read_rows("requests", "sim")) == 201
    assert ("write", True) in calls[io_calls:] and encoded_on_loop[encodings:] == [True]  # the watch works
    assert not any(on_loop for _, on_loop in calls[:io_calls]), f"file I/O on the timing loop: {calls[:5]}"
    assert not any(encoded_on_loop[:encodings]), "rows JSON-encoded on the timing loop"
    print(f"loop lag over {len(lags)} ticks: max {1e3 * max(lags):.1f} ms besides waits for a core "
          f"(max {1e3 * max(raw_lags):.1f} ms in all)")
    assert max(lags) < MAX_LOOP_STALL_S, f"the loop stalled {max(lags):.3f} s while the disk stalled"


def _runqueue_wait_s(schedstat: int) -> float:
    """Seconds the thread of the open /proc/thread-self/schedstat has waited for a core (runnable, not running)."""
    return int(os.pread(schedstat, 100, 0).split()[1]) / 1e9


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_queued_rows_reach_the_file_within_the_flush_interval_and_all_on_close(tmp_path):
    run_dir = RunDir("r", root=tmp_path)
    path = tmp_path / "r" / "tables" / "requests" / "e" / "p.jsonl"
    with run_dir.rows("requests", "e", "p") as out:
        with out.off_loop(flush_every_s=0.05) as queued:
            queued.write({"request_id": "a", "n": 1})
            deadline = time.monotonic() + 5  # 50 ms, generously: the machine is shared
            while not path.read_text() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _lines(path) == [{"request_id": "a", "n": 1}]  # on disk before the block ends
            for i in range(500):
                queued.write({"request_id": f"b{i}"})
        assert [r["request_id"] for r in _lines(path)] == ["a"] + [f"b{i}" for i in range(500)]
        assert out.count == 501
        out.write({"request_id": "after"})  # the writer goes on synchronously after the block
    assert _lines(path)[-1] == {"request_id": "after"}


def test_a_failing_row_writer_fails_the_round_instead_of_dropping_rows(tmp_path):
    run_dir = RunDir("r", root=tmp_path)
    with run_dir.rows("requests", "e", "p") as out:
        with pytest.raises(RuntimeError, match="row writer"):
            with out.off_loop(flush_every_s=0.01) as queued:
                queued.write({"bad": object()})  # not JSON: the thread fails
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    queued.write({"ok": 1})  # raises once the thread has failed
                    time.sleep(0.01)
    assert not any(t.name == "dayone-row-writer" for t in threading.enumerate())
