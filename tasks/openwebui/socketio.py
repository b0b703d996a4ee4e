"""The socket.io connection OpenWebUI's web app opens, through python-socketio's AsyncClient (Engine.IO 4 over
a websocket, Socket.IO 5, reconnecting as the web app's client does): authenticated with the user's token,
every event the server emits queued for the session."""

from __future__ import annotations

import asyncio
from typing import Any

import socketio

SOCKET_PATH = "/ws/socket.io"  # OpenWebUI's socketio_path (open_webui/socket/main.py)


class SocketIOError(RuntimeError):
    pass


class SocketIO:
    """One authenticated socket.io session: `sid` is what the web app sends as `session_id`; every
    event the server emits is queued in `events` as (name, data)."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.client = socketio.AsyncClient(reconnection=True, reconnection_attempts=3, reconnection_delay=0.5)
        self.client.on("*", self._event)

    @property
    def sid(self) -> str:
        """The namespace's session id (a reconnect gets a new one: read it when sending)."""
        return self.client.get_sid() or ""

    async def _event(self, event: str, *args: Any) -> None:
        await self.events.put((event, args[0] if args else None))

    async def __aenter__(self) -> SocketIO:
        try:
            await self.client.connect(self.base_url, socketio_path=SOCKET_PATH, transports=["websocket"],
                                      auth={"token": self.token}, wait_timeout=self.timeout_s)
        except socketio.exceptions.ConnectionError as exc:
            raise SocketIOError(f"socket.io refused the connection: {exc}") from exc
        return self

    async def emit(self, event: str, data: Any) -> None:
        await self.client.emit(event, data)

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.disconnect()
