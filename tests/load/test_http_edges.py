"""HTTP edges a real endpoint shows, against raw servers written for the test (tests/load/raw_server.py):
a body framed by the connection's close, a keep-alive connection the server closes right after a
response or just as the next request arrives, and idle connections the server closes in the pool."""

from __future__ import annotations

import asyncio
import json
import time

from raw_server import RawServer, chunked, sse_body

from tasks.engines import adapter_for
from tasks.load.client import RequestSpec, new_session, run_async, run_closed_loop

ADAPTER = adapter_for("vllm")
SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def _specs(n: int) -> list[RequestSpec]:
    body = json.dumps({"model": "raw-model", "prompt": "a b", "max_tokens": 4, "stream": True}).encode()
    return [RequestSpec(f"req-{i}", "/v1/completions", body) for i in range(n)]


def _measure(url: str, n: int, concurrency: int = 1):
    async def main():
        async with new_session() as session:
            return await run_closed_loop(session, url, _specs(n), concurrency, ADAPTER, 10.0)

    return run_async(main())


class CloseFramed(RawServer):
    """HTTP/1.1, no Content-Length, not chunked, `Connection: close`: the body ends where the connection does."""

    def respond(self, n, conn_id):
        return SSE + b"Connection: close\r\n\r\n" + sse_body(), True


def test_a_body_framed_by_the_connection_close_ends_complete_not_failed():
    with CloseFramed() as server:
        async def one():
            async with new_session() as session:
                destination = session.destination(server.url)
                conn = await session.connect(destination)
                head = session.request_head(destination, "/v1/completions", "r", 2)
                exchange = conn.send(head + b"{}", lambda b, t: None)
                await exchange.done
                return exchange.complete, exchange.failure, exchange.keep_alive

        complete, failure, keep_alive = run_async(one())
        results = _measure(server.url, 3)
    assert (complete, failure, keep_alive) == (True, None, False)
    assert [(r.status, r.output_events) for r in results] == [("ok", 4)] * 3


class ClosesRightAfterResponse(RawServer):
    """Announces keep-alive (chunked, no `Connection: close`), then closes the moment the response is out."""

    def respond(self, n, conn_id):
        return SSE + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(sse_body()), True


def test_a_keep_alive_connection_closed_right_after_a_response_costs_the_next_request_nothing():
    with ClosesRightAfterResponse() as server:
        results = _measure(server.url, 6)
        answered = len(server.arrivals)
    assert [r.status for r in results] == ["ok"] * 6, [r.error for r in results]
    assert len({r.request_id for r in results}) == 6 and answered == 6  # each request sent and counted once


class ClosesAtTheNextRequest(RawServer):
    """Answers the first request on a connection, kept alive; when the next one arrives on it, closes without a
    byte of a response: the race of a server closing an idle connection as the client reuses it."""

    def respond(self, n, conn_id):
        if n >= 1:
            return None, True
        return SSE + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(sse_body()), False


def test_a_request_on_a_connection_the_server_closed_unanswered_goes_once_more_on_a_fresh_one():
    with ClosesAtTheNextRequest() as server:
        results = _measure(server.url, 5)
        arrivals = list(server.arrivals)
    assert [r.status for r in results] == ["ok"] * 5, [r.error for r in results]
    assert len(results) == 5 and len({r.request_id for r in results}) == 5  # one row each
    answered = [a for a in arrivals if a["n"] == 0]
    refused = [a for a in arrivals if a["n"] >= 1]
    assert len(answered) == 5 and len(refused) == 4  # requests 2..5 each met a closing connection first
    assert all(r.send_ts >= a["arrived"] for r, a in zip(results[1:], refused))  # the send stamp is the resend's


class NeverAnswers(RawServer):
    def respond(self, n, conn_id):
        return None, True


def test_a_fresh_connection_closed_unanswered_is_a_failure_not_a_retry():
    """Only a reused connection's close is the idle-close race; a new connection's is the server's answer."""
    with NeverAnswers() as server:
        (result,) = _measure(server.url, 1)
        sent = len(server.arrivals)
    assert result.status == "error" and sent == 1


class ClosesIdleWhenTold(RawServer):
    """Closes every connection when told (`close_idle`), after its response, as an idle timeout does: told
    by the test once the pool is counted, not after a fixed time a loaded machine may outlast."""

    def __init__(self) -> None:
        super().__init__()
        self._idle_timeout = asyncio.Event()  # bound to the server's loop at its first wait

    def respond(self, n, conn_id):
        return SSE + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(sse_body()), False

    def close_idle(self) -> None:
        self._loop.call_soon_threadsafe(self._idle_timeout.set)

    async def _serve(self, reader, writer):
        serving = asyncio.ensure_future(super()._serve(reader, writer))
        await self._idle_timeout.wait()
        serving.cancel()
        writer.close()


def test_idle_connections_the_server_closed_leave_the_pool():
    with ClosesIdleWhenTold() as server:
        async def main():
            async with new_session() as session:
                await run_closed_loop(session, server.url, _specs(4), 4, ADAPTER, 10.0)
                pooled = session.idle_connections()
                server.close_idle()
                deadline = time.monotonic() + 5  # the closes reach the pool as its loop reads them
                while (session.idle_connections() or session.connections()) and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                return pooled, session.idle_connections(), len(session.connections())

        pooled, after, open_ = run_async(main())
    assert pooled == 4 and after == 0 and open_ == 0
