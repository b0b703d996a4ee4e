"""A person using OpenWebUI, through the web app's own path: sign up, read the model list, and chat
in turns over a socket.io session as its front end does (src/lib/components/chat/Chat.svelte,
`sendMessageSocket`), then read back what OpenWebUI stored for the chat."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from tasks.config.openwebui import ADMIN
from tasks.openwebui.socketio import SocketIO

# OpenWebUI's socket events for one assistant message (open_webui/utils/middleware.py)
TEXT_DELTA, REASONING_DELTA = "response.output_text.delta", "response.reasoning_text.delta"


@dataclass
class Turn:
    """One message sent and what came back: the HTTP answer, the streamed events, the last event."""

    prompt: str
    status: int | None = None
    chat_id: str = ""
    user_message_id: str = ""
    error: str | None = None
    text_deltas: list[str] = field(default_factory=list)
    reasoning_deltas: list[str] = field(default_factory=list)
    first_delta_s: float | None = None  # from the request to the first streamed text or reasoning
    done: dict[str, Any] | None = None  # the chat:completion event with done: true


class Person:
    """One signed-in user of one OpenWebUI."""

    def __init__(self, base_url: str, timeout_s: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.token = ""
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout_s)

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def sign_up(self, password: str) -> dict[str, Any]:
        r = self.http.post("/api/v1/auths/signup", json={**ADMIN, "password": password})
        r.raise_for_status()
        body = r.json()
        self.token = body["token"]
        return {"role": body.get("role")}

    def sign_in(self, password: str) -> dict[str, Any]:
        """Sign in as the admin OpenWebUI made at start (WEBUI_ADMIN_*, as on a cluster)."""
        r = self.http.post("/api/v1/auths/signin", json={"email": ADMIN["email"], "password": password})
        r.raise_for_status()
        body = r.json()
        self.token = body["token"]
        return {"role": body.get("role")}

    def models(self) -> tuple[int, list[dict[str, Any]]]:
        r = self.http.get("/api/models", headers=self._auth())
        return r.status_code, (r.json().get("data") or []) if r.status_code == 200 else []

    def stored_chat(self, chat_id: str) -> dict[str, Any]:
        r = self.http.get(f"/api/v1/chats/{chat_id}", headers=self._auth())
        r.raise_for_status()
        return r.json()

    async def converse(self, model: dict[str, Any], prompts: list[str]) -> list[Turn]:
        """Send each prompt in one chat, each after the last answer is done, as the web app does."""
        turns: list[Turn] = []
        async with SocketIO(self.base_url, self.token, self.timeout_s) as socket:
            await socket.emit("user-join", {"auth": {"token": self.token}})
            parent_id: str | None = None
            chat_id = ""
            for prompt in prompts:
                turn = await self._send(socket, model, prompt, chat_id, parent_id)
                turns.append(turn)
                if turn.error or turn.done is None:
                    break
                chat_id = turn.chat_id
                parent_id = turn.done["message_id"]
        return turns

    async def _send(self, socket: SocketIO, model: dict[str, Any], prompt: str, chat_id: str,
                    parent_id: str | None) -> Turn:
        user_id, response_id = str(uuid.uuid4()), str(uuid.uuid4())
        turn = Turn(prompt, user_message_id=user_id)
        user_message = {"id": user_id, "parentId": parent_id, "childrenIds": [response_id], "role": "user",
                        "content": prompt, "timestamp": int(time.time()), "models": [model["id"]]}
        body = {"stream": True, "model": model["id"], "params": {}, "tool_ids": [], "features": {},
                "variables": {}, "model_item": model, "session_id": socket.sid,
                **({"chat_id": chat_id} if chat_id else {}), "id": response_id, "parent_id": parent_id,
                "user_message": user_message, "background_tasks": {"follow_up_generation": False}}
        sent = time.monotonic()
        r = await asyncio.to_thread(self.http.post, "/api/chat/completions", json=body, headers=self._auth())
        turn.status = r.status_code
        answer = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        if r.status_code != 200 or not answer.get("chat_id"):
            turn.error = f"HTTP {r.status_code}: {r.text[:300]}"
            return turn
        turn.chat_id = answer["chat_id"]
        deadline = sent + self.timeout_s
        while turn.done is None:
            try:
                name, event = await asyncio.wait_for(socket.events.get(), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                turn.error = f"no finished answer on the socket within {self.timeout_s:.0f} s"
                return turn
            if name != "events" or not isinstance(event, dict) or event.get("chat_id") != turn.chat_id:
                continue
            data = event.get("data") or {}
            kind, payload = data.get("type"), data.get("data") or {}
            if kind in ("response:completion", "chat:completion") and isinstance(payload, dict):
                delta_kind = payload.get("type")
                if delta_kind in (TEXT_DELTA, REASONING_DELTA) and payload.get("delta"):
                    if turn.first_delta_s is None:
                        turn.first_delta_s = round(time.monotonic() - sent, 3)
                    (turn.text_deltas if delta_kind == TEXT_DELTA else turn.reasoning_deltas).append(payload["delta"])
                if kind == "chat:completion" and payload.get("done"):
                    turn.done = {**payload, "message_id": event.get("message_id")}
            elif kind == "chat:message:error":
                turn.error = str((payload.get("error") or {}).get("content") or payload)[:300]
                return turn
        return turn
