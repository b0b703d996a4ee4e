"""The load client's pool against a raw socket server written for the test: a connection that
sends bytes nobody asked for between requests is closed, never reused for the next request."""

from __future__ import annotations

import json
import socket
import threading
import time

from tasks.engines import adapter_for
from tasks.load.client import RequestSpec, new_session, run_async, send_request

SSE = b'data: {"choices":[{"text":"t"}],"usage":{"completion_tokens":1}}\n\ndata: [DONE]\n\n'
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)


def _serve(listener: socket.socket, stray: bytes, connections: list[int], idle: threading.Event,
           sent: threading.Event) -> None:
    """Each connection: answer every request; after the first answer, once the client says the connection is
    idle in its pool, send `stray` (then say so)."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        connections.append(1)

        def handle(conn: socket.socket = conn) -> None:
            with conn:
                first = True
                while True:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        data += chunk
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                      if line.lower().startswith(b"content-length")))
                    while len(body) < length:
                        body += conn.recv(65536)
                    conn.sendall(RESPONSE)
                    if first and stray:
                        idle.wait(10)
                        conn.sendall(stray)
                        sent.set()
                    first = False

        threading.Thread(target=handle, daemon=True).start()


def _two_requests(stray: bytes) -> tuple[list[str], list[int], int]:
    listener = socket.create_server(("127.0.0.1", 0))
    connections: list[int] = []
    idle, sent = threading.Event(), threading.Event()
    threading.Thread(target=_serve, args=(listener, stray, connections, idle, sent), daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    body = json.dumps({"prompt": "x", "max_tokens": 1, "stream": True}).encode()

    async def go():
        import asyncio

        async with new_session() as session:
            first = await send_request(session, url, RequestSpec("a", "/v1/completions", body), adapter_for("vllm"), 10)
            idle.set()  # the stray bytes arrive while the connection is idle in the pool, not with a response
            if stray:  # the pool drops the connection when its loop reads them: a deadline, not a guess
                deadline = time.monotonic() + 5
                while not sent.is_set() and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                while session.connections() and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            else:
                await asyncio.sleep(0.05)  # nothing comes: the quiet connection stays
            open_idle = len(session.connections())
            second = await send_request(session, url, RequestSpec("b", "/v1/completions", body), adapter_for("vllm"), 10)
            return [first.status, second.status], open_idle

    try:
        statuses, open_idle = run_async(go())
    finally:
        listener.close()
    return statuses, connections, open_idle


def test_a_connection_that_sends_unasked_bytes_is_closed_and_not_reused():
    statuses, connections, open_idle = _two_requests(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray")
    assert statuses == ["ok", "ok"]
    assert open_idle == 0 and len(connections) == 2  # the second request had a connection of its own


def test_a_quiet_connection_is_reused():
    statuses, connections, open_idle = _two_requests(b"")
    assert statuses == ["ok", "ok"] and open_idle == 1 and len(connections) == 1
