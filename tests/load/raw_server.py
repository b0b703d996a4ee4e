"""A raw HTTP/1.1 server written for the load client's edge tests, apart from the simulator and
the plain server: it frames each response by hand, so a test can choose what aiohttp would not do.

Each connection reads request heads and bodies (Content-Length) and answers with `respond(n, conn_id)`:
the bytes of the n-th response on that connection, and whether to close the connection after it
(or, with `None` for the bytes, close without answering). It records for every request the time it
arrived (time.time() at the read that completed the head) and on which connection.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
from typing import Any

TOKENS = 4


def sse_body(tokens: int = TOKENS) -> bytes:
    events = [{"id": "raw", "object": "text_completion", "model": "raw-model",
               "choices": [{"index": 0, "text": f"w{i} ", "finish_reason": None}]} for i in range(tokens)]
    events.append({"id": "raw", "model": "raw-model", "choices": [],
                   "usage": {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens}})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def chunked(body: bytes) -> bytes:
    return f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"


class RawServer:
    """Override `respond(n, conn_id) -> (bytes | None, close_after)`; default: a chunked SSE stream, kept alive."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self.url = ""
        self.arrivals: list[dict[str, Any]] = []  # conn, n, arrived (time.time()), head
        self.connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None

    def respond(self, n: int, conn_id: int) -> tuple[bytes | None, bool]:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        return head + chunked(sse_body()), False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn_id, n = self.connections, 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                arrived = time.time()
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                self.arrivals.append({"conn": conn_id, "n": n, "arrived": arrived, "head": head.decode("latin-1")})
                data, close = self.respond(n, conn_id)
                n += 1
                if data is None:
                    return  # close without answering
                writer.write(data)
                await writer.drain()
                if close:
                    return
        finally:
            writer.close()

    def start(self) -> "RawServer":
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context))
            port = self._server.sockets[0].getsockname()[1]
            self.url = f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{port}"
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True, name=type(self).__name__)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("raw server did not start")
        return self

    async def _shut(self) -> None:
        """Close the listener and end every open connection's coroutine here, in the loop: one left pending
        is finalized later by whatever garbage collection runs next in this process, in another test."""
        self._server.close()  # type: ignore[union-attr]
        connections = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)

    def stop(self) -> None:
        if self._loop is None:
            return
        loop = self._loop
        asyncio.run_coroutine_threadsafe(self._shut(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()
        self._loop = None

    def __enter__(self) -> "RawServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
