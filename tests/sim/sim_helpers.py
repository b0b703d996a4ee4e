"""Raw SSE reading for the simulator tests (no DayOne client in between)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Stream:
    status: int
    events: list[Any] = field(default_factory=list)  # parsed JSON, "[DONE]", or ("malformed", text)
    times: list[float] = field(default_factory=list)  # client receive time per event (epoch)
    done: bool = False
    error: str | None = None

    def deltas(self) -> list[dict[str, Any]]:
        return [e["choices"][0]["delta"] for e in self.events if isinstance(e, dict) and e.get("choices")]

    def field(self, name: str) -> str:
        return "".join(d.get(name) or "" for d in self.deltas())

    def texts(self) -> list[str]:
        return [e["choices"][0].get("text", "") for e in self.events if isinstance(e, dict) and e.get("choices")]

    def usage(self) -> dict[str, Any] | None:
        found = [e["usage"] for e in self.events if isinstance(e, dict) and e.get("usage")]
        return found[-1] if found else None


def stream(url: str, path: str, body: dict[str, Any], request_id: str | None = None, timeout: float = 30) -> Stream:
    headers = {"X-Request-Id": request_id} if request_id else {}
    out = Stream(0)
    try:
        with httpx.stream("POST", url + path, json={**body, "stream": True}, headers=headers, timeout=timeout) as r:
            out.status = r.status_code
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                out.times.append(time.time())
                if data == "[DONE]":
                    out.done = True
                    out.events.append(data)
                    continue
                try:
                    out.events.append(json.loads(data))
                except json.JSONDecodeError:
                    out.events.append(("malformed", data))
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    return out


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "dayone-sim-model", "messages": [{"role": "user", "content": text}], **extra}
