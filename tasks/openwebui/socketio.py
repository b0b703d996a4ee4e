"""The socket.io connection OpenWebUI's web app opens (Engine.IO 4 over a websocket, Socket.IO 5
packets): just enough of the protocol to authenticate, answer pings and read the server's events."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

SOCKET_PATH = "/ws/socket.io/"  # OpenWebUI's socketio_path (open_webui/socket/main.py)
# Engine.IO packet types (first character) and Socket.IO packet types (second)
EIO_OPEN, EIO_PING, EIO_PONG, EIO_MESSAGE = "0", "2", "3", "4"
SIO_CONNECT, SIO_EVENT, SIO_CONNECT_ERROR = "0", "2", "4"


class SocketIOError(RuntimeError):
    pass


class SocketIO:
    """One authenticated socket.io session: `sid` is what the web app sends as `session_id`; every
    event the server emits is queued in `events` as (name, data)."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 30.0) -> None:
        self.url = base_url.rstrip("/").replace("http", "ws", 1) + SOCKET_PATH + "?EIO=4&transport=websocket"
        self.token = token
        self.timeout_s = timeout_s
        self.sid = ""
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task | None = None

    async def __aenter__(self) -> SocketIO:
        self._session = aiohttp.ClientSession()
        self._ws = await self._session.ws_connect(self.url, timeout=aiohttp.ClientWSTimeout(ws_close=self.timeout_s))
        opened = await self._receive()
        if not opened.startswith(EIO_OPEN):
            raise SocketIOError(f"expected the Engine.IO open packet, got {opened[:80]!r}")
        await self._ws.send_str(EIO_MESSAGE + SIO_CONNECT + json.dumps({"token": self.token}))
        while True:  # the namespace's answer, after any pings
            packet = await self._receive()
            if packet == EIO_PING:
                await self._ws.send_str(EIO_PONG)
                continue
            if packet.startswith(EIO_MESSAGE + SIO_CONNECT_ERROR):
                raise SocketIOError(f"socket.io refused the connection: {packet[2:200]}")
            if packet.startswith(EIO_MESSAGE + SIO_CONNECT):
                self.sid = json.loads(packet[2:] or "{}").get("sid", "")
                break
        self._reader = asyncio.create_task(self._read())
        return self

    async def emit(self, event: str, data: Any) -> None:
        assert self._ws is not None
        await self._ws.send_str(EIO_MESSAGE + SIO_EVENT + json.dumps([event, data]))

    async def _receive(self) -> str:
        assert self._ws is not None
        msg = await asyncio.wait_for(self._ws.receive(), self.timeout_s)
        if msg.type != aiohttp.WSMsgType.TEXT:
            raise SocketIOError(f"socket.io connection ended ({msg.type.name})")
        return msg.data

    async def _read(self) -> None:
        assert self._ws is not None
        async for msg in self._ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            packet = msg.data
            if packet == EIO_PING:
                await self._ws.send_str(EIO_PONG)
            elif packet.startswith(EIO_MESSAGE + SIO_EVENT):
                body = packet[2:]
                body = body[body.index("["):]  # an acknowledgement id may precede the array
                name, *args = json.loads(body)
                await self.events.put((name, args[0] if args else None))

    async def __aexit__(self, *exc: Any) -> None:
        if self._reader is not None:
            self._reader.cancel()
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
