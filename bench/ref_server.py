"""A plain OpenAI-style streaming server to time load clients against: it shares no code with
DayOne (not its simulator, not aiohttp), so what it records is an independent account. Used by
bench/load_accuracy.py and by the load client's tests.

One thread, one selector, one timer heap. Per request (keyed by X-Request-Id) it records, as Unix
times from time.time():
- arrival_ts: when the request's last byte reached this host's kernel: the receive timestamp of
  the read that completed the body (SO_TIMESTAMPNS, Linux). Unlike the time this server got round
  to reading it, it does not move when this process is descheduled on a busy machine. Where the
  platform gives no timestamp, the time of the read;
- read_ts: when this server read that last byte;
- event_ts: when each output token event was handed to the kernel (right after its send call).

POST /v1/completions and /v1/chat/completions stream `max_tokens` (or `max_completion_tokens`)
token events, the first `ttft_s` after the arrival and then one every `itl_s`, then a usage event
and [DONE], chunked, keep-alive. GET /log returns the records as JSON, GET /v1/models the model.
The timer is precise: the last millisecond before an event is spun, not slept (a sleep wakes up
to a millisecond late), so pin the server to a core of its own when that matters.

Usage: python ref_server.py --ttft 0.02 --itl 0.005 [--port N]   (prints "port N" once listening)
"""

from __future__ import annotations

import argparse
import heapq
import json
import selectors
import socket
import struct
import sys
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None)
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
SPIN_S = 0.001  # events due sooner than this are waited for by polling, not by a blocking wait
MODEL = "ref-model"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(doc: dict) -> bytes:
    return chunk(b"data: " + json.dumps(doc).encode() + b"\n\n")


class Server:
    def __init__(self, ttft_s: float, itl_s: float, port: int = 0):
        self.ttft_s, self.itl_s = ttft_s, itl_s
        self.sel = selectors.DefaultSelector()
        self.timers: list[tuple[float, int, socket.socket, str, int, int, bool]] = []
        self.seq = 0
        self.log: dict[str, dict] = {}
        self.bufs: dict[socket.socket, bytes] = {}
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if SO_TIMESTAMPNS is not None:  # on the listener too: stamps a request sent before the accept
            self.listener.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(1024)
        self.sel.register(self.listener, selectors.EVENT_READ)

    def serve(self) -> None:
        print(f"port {self.listener.getsockname()[1]}", flush=True)
        while True:
            timeout = max(0.0, self.timers[0][0] - time.time()) if self.timers else None
            if timeout is not None and timeout < SPIN_S:
                timeout = 0.0  # spin: a blocking wait rounds up to whole milliseconds
            for key, _ in self.sel.select(timeout):
                if key.fileobj is self.listener:
                    self.accept()
                else:
                    self.read(key.fileobj)  # type: ignore[arg-type]
            now = time.time()
            while self.timers and self.timers[0][0] <= now:
                _, _, sock, rid, k, n, chat = heapq.heappop(self.timers)
                self.send_event(sock, rid, k, n, chat)

    def accept(self) -> None:
        sock, _ = self.listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if SO_TIMESTAMPNS is not None:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.bufs[sock] = b""
        self.sel.register(sock, selectors.EVENT_READ)

    def read(self, sock: socket.socket) -> None:
        try:
            data, anc, _, _ = sock.recvmsg(1 << 16, 256)
        except ConnectionError:
            data, anc = b"", []
        read_ts = time.time()
        if not data:
            self.sel.unregister(sock)
            self.bufs.pop(sock, None)
            sock.close()
            return
        kernel_ts = read_ts
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", raw[:16])
                kernel_ts = sec + nsec / 1e9
        buf = self.bufs[sock] + data
        head_end = buf.find(b"\r\n\r\n")
        if head_end < 0:
            self.bufs[sock] = buf
            return
        lines = buf[:head_end].decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        body = buf[head_end + 4 :]
        if len(body) < length:
            self.bufs[sock] = buf
            return
        self.bufs[sock] = body[length:]  # one request at a time per connection
        method, path = lines[0].split(" ")[:2]
        if method == "GET" and path == "/log":
            doc = json.dumps(self.log).encode()
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(doc), doc))
            return
        if method == "GET" and path == "/v1/models":
            doc = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(doc), doc))
            return
        if method != "POST":  # e.g. DayOne's /metrics scrape around a round: a plain server has none
            sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        self.seq += 1
        rid = headers.get("x-request-id", f"anon-{self.seq}")
        req = json.loads(body[:length])
        n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        self.log[rid] = {"arrival_ts": kernel_ts, "read_ts": read_ts, "event_ts": []}
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        chat = path.endswith("/chat/completions")
        for k in range(n):
            self.seq += 1
            due = kernel_ts + self.ttft_s + k * self.itl_s
            heapq.heappush(self.timers, (due, self.seq, sock, rid, k, n, chat))

    def send_event(self, sock: socket.socket, rid: str, k: int, n: int, chat: bool) -> None:
        if chat:
            doc = {"object": "chat.completion.chunk", "model": MODEL,
                   "choices": [{"index": 0, "delta": {"content": "t"}, "finish_reason": None}]}
        else:
            doc = {"object": "text_completion", "model": MODEL,
                   "choices": [{"index": 0, "text": "t", "finish_reason": None}]}
        try:
            sock.sendall(event(doc))
        except OSError:
            return  # the client went away
        self.log[rid]["event_ts"].append(time.time())
        if k == n - 1:
            usage = {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": n + 4}
            tail = event({"object": doc["object"], "model": MODEL, "choices": [], "usage": usage})
            sock.sendall(tail + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ttft", type=float, default=0.02)
    ap.add_argument("--itl", type=float, default=0.005)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    Server(args.ttft, args.itl, args.port).serve()


if __name__ == "__main__":
    main()
