"""The load client's HTTP/1.1 connections: asyncio protocols on uvloop, responses framed by
httptools (llhttp, the parser of Node.js), a keep-alive pool per session.

Not aiohttp on the measured path: its parser, StreamReader and a woken task per token event cost the
client's core enough to delay the stamps of a wave's events (bench/RESULTS.md). Here the read
callback hands the body bytes to the stream's parser, and a request is one `transport.write`. The HTTP
edges a real endpoint shows (close-framed bodies, a pooled connection closed just before reuse:
`stale`, TLS and API keys): PROTOCOL.md section 8, "The load client's HTTP edges".
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

import httptools

if TYPE_CHECKING:
    from tasks.engines.access import EndpointAccess

MAX_ERROR_BODY = 500  # bytes of a non-200 body kept in the error text


@dataclass(frozen=True)
class RequestDestination:
    """Where requests go: host, port, TLS, and the base URL's path prefix."""

    host: str
    port: int
    tls: bool
    prefix: str
    host_header: str

    @classmethod
    def parse(cls, base_url: str) -> "RequestDestination":
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        host_header = shown if parts.port is None else f"{shown}:{port}"
        return cls(host, port, tls, parts.path.rstrip("/"), host_header)


class Exchange:
    """One request's response as it arrives: status, the body's bytes fed to `on_body` with the
    time of the read that brought them, and `done` once the response ended or failed."""

    def __init__(self, on_body: Callable[[bytes, float], None], loop: asyncio.AbstractEventLoop) -> None:
        self.on_body = on_body
        self.done: asyncio.Future[None] = loop.create_future()
        self.status: int | None = None
        self.error_body = b""
        self.failure: BaseException | None = None  # raised by on_body, or the connection's end
        self.complete = False  # the response ended as HTTP framed it
        self.keep_alive = False
        self.response_bytes = 0  # bytes of the response read so far
        self.framed_by_close = False  # no Content-Length, not chunked: the body ends when the server closes
        self.reused = False  # sent on a pooled connection that had served a response before

    @property
    def stale(self) -> bool:
        """The server closed a reused connection before any byte of a response: it did not answer this
        request, which can go once more on a fresh connection."""
        return self.reused and self.response_bytes == 0 and self.failure is not None and self.status is None

    def finish(self, failure: BaseException | None = None) -> None:
        if self.failure is None:
            self.failure = failure
        if not self.done.done():
            self.done.set_result(None)


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; one request at a time. `on_lost` runs when the connection ends
    (the session drops it from its pool)."""

    def __init__(self, on_lost: Callable[["Connection"], None] | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.served = 0  # responses completed on this connection
        self.on_lost = on_lost
        self._length_known = False  # the response named a Content-Length or chunked framing
        self.rx_t = 0.0  # perf_counter time of the latest read
        self.drained_t = 0.0  # when a write the kernel took only in part had fully left
        self._drained: asyncio.Future[None] | None = None
        self._exchange: Exchange | None = None
        self._http: httptools.HttpResponseParser | None = None

    # ---- asyncio protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        # any byte left queued pauses writing; the resume comes when the queue is empty
        transport.set_write_buffer_limits(high=0)  # type: ignore[attr-defined]

    def pause_writing(self) -> None:
        self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self.drained_t = time.perf_counter()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.rx_t = time.perf_counter()
        if self._exchange is None or self._http is None or self._exchange.done.done():
            self.close()  # bytes nobody asked for (none, or after the response): not in a known state
            return
        self._exchange.response_bytes += len(data)
        try:
            self._http.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"malformed HTTP response: {exc}"))

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        ex = self._exchange
        if ex is not None and not ex.done.done():
            if exc is None and ex.framed_by_close and ex.status is not None:
                ex.complete = True  # the close is the end of the body (RFC 9112 6.3, item 8)
                ex.finish()
            else:
                ex.finish(exc or ConnectionResetError("the server closed the connection"))
        if self.on_lost is not None:
            self.on_lost(self)

    # ---- httptools callbacks -----------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower == b"content-length" or (lower == b"transfer-encoding" and b"chunked" in value.lower()):
            self._length_known = True

    def on_headers_complete(self) -> None:
        assert self._exchange is not None and self._http is not None
        self._exchange.status = status = self._http.get_status_code()
        # a response with no body by its status needs no framing; any other unframed one ends at the close
        self._exchange.framed_by_close = not self._length_known and status >= 200 and status not in (204, 304)

    def on_body(self, body: bytes) -> None:
        ex = self._exchange
        assert ex is not None
        if ex.done.done():
            return
        if ex.status != 200:
            ex.error_body += body[: MAX_ERROR_BODY - len(ex.error_body)]
            if len(ex.error_body) >= MAX_ERROR_BODY:
                self._fail(None)  # enough to quote; the rest is not read
            return
        try:
            ex.on_body(body, self.rx_t)
        except Exception as exc:  # the stream's parser refused the bytes
            self._fail(exc)

    def on_message_complete(self) -> None:
        ex = self._exchange
        assert ex is not None and self._http is not None
        ex.complete = True
        ex.keep_alive = self._http.should_keep_alive() and not ex.framed_by_close
        self.served += 1
        ex.finish()

    # ---- use -----------------------------------------------------------------------------------
    def send(self, data: bytes, on_body: Callable[[bytes, float], None]) -> Exchange:
        """Write one request; returns its exchange. The caller awaits `drained()` then `done`."""
        assert self.transport is not None
        self._exchange = Exchange(on_body, asyncio.get_running_loop())
        self._exchange.reused = self.served > 0
        self._length_known = False
        self._http = httptools.HttpResponseParser(self)
        if self.closed or self.transport.is_closing():  # closed under us since the pool handed it out
            self._exchange.finish(ConnectionResetError("the server closed the connection before the request"))
            return self._exchange
        self.transport.write(data)
        return self._exchange

    async def drained(self) -> float:
        """The perf_counter time the request's last byte was handed to the kernel."""
        t = time.perf_counter()
        if self._drained is not None and not self._drained.done():
            await self._drained
            return self.drained_t
        return t

    def reusable(self) -> bool:
        ex = self._exchange
        return not self.closed and ex is not None and ex.complete and ex.keep_alive and ex.failure is None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, failure: BaseException | None) -> None:
        assert self._exchange is not None
        self._exchange.finish(failure)
        self.close()


class StreamSession:
    """A pool of keep-alive connections that grows to one per request in flight.

    keep_alive=False opens a connection per request, for servers that close the connection after
    a streamed response while announcing keep-alive (reusing it fails the next request).
    """

    def __init__(self, keep_alive: bool = True, access: EndpointAccess | None = None) -> None:
        self.keep_alive = keep_alive
        self.access = access
        self._idle: dict[RequestDestination, list[Connection]] = {}
        self._open: set[Connection] = set()
        self._destinations: dict[str, RequestDestination] = {}
        self._tls: ssl.SSLContext | None = None
        key = access.api_key if access is not None else None
        self._auth = f"Authorization: Bearer {key}\r\n" if key else ""

    def destination(self, base_url: str) -> RequestDestination:
        d = self._destinations.get(base_url)
        if d is None:
            d = self._destinations[base_url] = RequestDestination.parse(base_url)
        return d

    async def connect(self, destination: RequestDestination, fresh: bool = False) -> Connection:
        """A pooled idle connection to `destination`, or a new one (always new with `fresh`)."""
        idle = self._idle.get(destination)
        while idle and not fresh:
            conn = idle.pop()
            if not conn.closed:
                return conn
        tls = None
        if destination.tls:
            if self._tls is None:
                self._tls = self.access.ssl_context() if self.access is not None else ssl.create_default_context()
            tls = self._tls
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(
            lambda: Connection(self._lost), destination.host, destination.port, ssl=tls,
            server_hostname=destination.host if tls else None
        )
        self._open.add(conn)
        return conn

    def _lost(self, conn: Connection) -> None:
        """A connection ended (the server closed it, idle or not): it leaves the pool at once."""
        self._open.discard(conn)
        for idle in self._idle.values():
            if conn in idle:
                idle.remove(conn)

    def idle_connections(self) -> int:
        return sum(len(v) for v in self._idle.values())

    def release(self, destination: RequestDestination, conn: Connection) -> None:
        if self.keep_alive and conn.reusable():
            self._idle.setdefault(destination, []).append(conn)
        else:
            conn.close()
            self._open.discard(conn)

    def request_head(self, destination: RequestDestination, path: str, request_id: str, body_len: int) -> bytes:
        close = "" if self.keep_alive else "Connection: close\r\n"
        return (
            f"POST {destination.prefix}{path} HTTP/1.1\r\nHost: {destination.host_header}\r\n"
            f"Content-Type: application/json\r\nAccept: */*\r\nUser-Agent: dayone\r\n"
            f"Content-Length: {body_len}\r\nX-Request-Id: {request_id}\r\n{self._auth}{close}\r\n"
        ).encode("latin-1")

    def connections(self) -> list[Connection]:
        return [c for c in self._open if not c.closed]

    async def close(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports close

    async def __aenter__(self) -> "StreamSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
