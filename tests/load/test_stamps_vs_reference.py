"""The client's send, first-event and token stamps against an independent server's own records
(PROTOCOL.md section 3), with all streams started at once and ramped.

bench/ref_server.py shares no code with DayOne. It records when each request's last byte
reached the kernel (the socket's receive timestamp, so its own scheduling does not move it) and
when it handed each token event to the kernel, all as Unix times; the client's times are Unix
times too (perf_counter anchored to time.time() per request), on the same host.

Bounds, generous for a busy two-core machine yet failing the old behaviour:
- send: the client once stamped aiohttp's headers-sent hook, before the task that wrote the request
  ran; in a burst of 64 streams that was 1-32 ms early (median 3-12 ms). The stamp is now the return
  of the request's one write (median error 5-20 us): the median |error| must stay under 0.5 ms and
  90% of them under 3 ms (on the loaded machine a group of requests once reached the server's
  socket 1.6 ms after their write).
- events: a stamp may not precede the server's send (5% may, by up to 1 ms: the server can be
  descheduled between its send and its stamp); the median delay to the client's read stays under
  25 ms and the 99th percentile under 150 ms even when other processes take the cores (measured
  here at a load average of 5-10 on two cores: median 0.2-3 ms, once 12 ms, p99 20-64 ms). These
  catch a stamp taken at the wrong moment (at the send, at the end of the stream), not a
  millisecond's drift; the line printed gives the share of the run the client spent waiting for
  a core (/proc/self/schedstat), which is what a slow figure here usually means.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from cpu_wait import runqueue_wait_s
from tasks.engines import adapter_for
from tasks.load.client import RequestSpec, new_session, run_async, run_closed_loop, send_request
from tasks.stats.figures import percentile

TOKENS = 16
STREAMS, REQUESTS = 64, 128  # two waves: the second is sent as the first completes
_runs: dict[str, list] = {}
ATTEMPTS, LOADED = 3, 0.15  # runs at most, and the share of a run waiting for a core that calls for another


def _run(ref, start: str):
    """One closed-loop run per start mode, shared by the tests below: (result, server record)s.
    Ramped: the streams start evenly over one request's duration.

    On a loaded machine the kernel's delivery of loopback packets (its softirq, then run by a thread that
    waits for a core like any other) lags the write by milliseconds, and the server's receive stamps with
    it (a median 1.6 ms once, in a run whose client waited for a core 21% of the time; alone with its server
    on two cores the client waits 5-10%): a run in which the client waited for a core more than LOADED of the time is run again, up to
    ATTEMPTS in all, and the least loaded one is judged. A stamp taken at the wrong moment is wrong in every
    attempt, the quiet ones too."""
    if start in _runs:
        return _runs[start]
    attempts = []
    for attempt in range(ATTEMPTS):
        pairs, waited = _one_run(ref, f"{start}{attempt}", start)
        print(f"{start} attempt {attempt + 1}: client waited for a core {100 * waited:.0f}% of the run")
        attempts.append((waited, attempt, pairs))
        if waited < LOADED:
            break
    _runs[start] = min(attempts)[2]
    return _runs[start]


def _one_run(ref, prefix: str, start: str) -> tuple[list, float]:
    ramp_s = 0.0 if start == "burst" else ref.ttft_s + (TOKENS - 1) * ref.itl_s
    specs = [
        RequestSpec(f"{prefix}-{i}", "/v1/completions",
                    json.dumps({"model": "m", "prompt": "x" * 400, "max_tokens": TOKENS, "stream": True}).encode(),
                    expected_completion_tokens=TOKENS)
        for i in range(REQUESTS)
    ]

    async def go():
        async with new_session() as session:
            return await run_closed_loop(session, ref.url, specs, STREAMS, adapter_for("vllm"), 30, ramp_s=ramp_s)

    waited0, t0 = runqueue_wait_s(), time.monotonic()
    results = run_async(go())
    waited = 0.0 if waited0 is None else (runqueue_wait_s() - waited0) / (time.monotonic() - t0)
    log = ref.log()
    assert len(results) == REQUESTS and all(r.status == "ok" for r in results), [r.error for r in results][:3]
    return [(r, log[r.request_id]) for r in results], waited


STARTS = pytest.mark.parametrize("start", ["burst", "ramped"])


@STARTS
def test_send_stamp_is_when_the_last_byte_reached_the_kernel(ref_server, start):
    pairs = _run(ref_server, start)
    err_ms = [(r.send_ts - t["arrival_ts"]) * 1e3 for r, t in pairs]
    abs_ms = [abs(e) for e in err_ms]
    summary = {q: round(percentile(err_ms, q), 3) for q in (0, 1, 50, 99, 100)}
    print(f"send - kernel arrival (ms), {start}: {summary}")
    assert percentile(abs_ms, 50) <= 0.5, summary
    assert percentile(abs_ms, 90) <= 3.0, summary


@STARTS
def test_event_stamps_are_when_the_bytes_were_read(ref_server, start):
    pairs = _run(ref_server, start)
    lag_ms, ttft_err_ms = [], []
    for r, t in pairs:
        assert r.output_events == len(t["event_ts"]) == TOKENS
        assert r.first_event_s == r.ttft_s  # every event of this server carries text
        read_ts = [r.send_ts + s for s in r.output_event_s]
        lag_ms += [(a - b) * 1e3 for a, b in zip(read_ts, t["event_ts"])]
        ttft_err_ms.append((r.ttft_s - (t["event_ts"][0] - t["arrival_ts"])) * 1e3)
    summary = {q: round(percentile(lag_ms, q), 3) for q in (0, 5, 50, 99, 100)}
    print(f"read - server send (ms), {start}: {summary}; TTFT error p50 "
          f"{percentile(ttft_err_ms, 50):.3f} p99 {percentile(ttft_err_ms, 99):.3f}")
    assert percentile(lag_ms, 5) >= -1.0, summary
    assert percentile(lag_ms, 50) <= 25.0, summary
    assert percentile(lag_ms, 99) <= 150.0, summary
    assert percentile(ttft_err_ms, 5) >= -1.0
    assert percentile(ttft_err_ms, 50) <= 25.0


def test_a_request_the_kernel_takes_in_parts_is_stamped_when_its_last_byte_left():
    """An 8 MiB body to a server that reads nothing for 0.3 s: the kernel takes what its buffers
    hold at once, the rest only as the server reads. The send time is when the last byte was
    handed over, after the server began reading; a stamp at the write call would be 0.3 s early."""
    hold_s, body = 0.3, json.dumps({"prompt": "x" * (8 << 20), "max_tokens": 1, "stream": True}).encode()
    marks: dict[str, float] = {}
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            time.sleep(hold_s)
            marks["read_from"] = time.time()
            data = b""
            while (end := data.find(b"\r\n\r\n")) < 0 or len(data) - end - 4 < len(body):
                data += conn.recv(1 << 20)
            marks["last_byte"] = time.time()
            sse = b'data: {"choices":[{"text":"t"}],"usage":{"completion_tokens":1}}\n\ndata: [DONE]\n\n'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(sse), sse))

    server = threading.Thread(target=serve, daemon=True)
    server.start()

    async def go():
        async with new_session(keep_alive=False) as session:
            called = time.time()
            spec = RequestSpec("big", "/v1/completions", body)
            return called, await send_request(session, f"http://127.0.0.1:{listener.getsockname()[1]}", spec,
                                              adapter_for("vllm"), 30)

    try:
        called, result = run_async(go())
        server.join(10)
    finally:
        listener.close()
    assert result.status == "ok", result.error
    print(f"send stamp - call {1e3 * (result.send_ts - called):.1f} ms, server read from "
          f"{1e3 * (marks['read_from'] - called):.1f} ms to {1e3 * (marks['last_byte'] - called):.1f} ms")
    assert marks["read_from"] <= result.send_ts <= marks["last_byte"] + 0.05
