"""A plain server that requires an API key, as an engine started with `--api-key K` does: every route
answers 401 without `Authorization: Bearer K`. It counts the requests it let in and those it refused,
and can answer one chosen generation request with a 500 whose body quotes the key as it is (an
upstream that echoes what it was given), so a test can see that the key never reaches a published byte."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from plain_server import PlainServer

KEY = "dk-plainKey-Zq81vX0tR7"  # a shape no scrubber pattern knows (not sk-, hf_, a JWT)


class KeyedServer(PlainServer):
    def __init__(self, key: str = KEY, echo_at: int | None = None, echo_tokens: int | None = None) -> None:
        super().__init__()
        self.key = key
        self.echo_at, self.echo_tokens = echo_at, echo_tokens  # the n-th generation of that many tokens
        self.authorized = 0
        self.refused: list[str] = []  # paths refused for a missing or wrong key
        self.echoed = 0
        self._generations = 0

    def routes(self) -> list[web.RouteDef]:
        return [web.route(r.method, r.path, self._guard(r.handler)) for r in super().routes()]

    def _guard(self, handler: Any) -> Any:
        async def guarded(request: web.Request) -> web.StreamResponse:
            if request.headers.get("Authorization") != f"Bearer {self.key}":
                self.refused.append(request.path)
                return web.json_response({"error": {"message": "invalid api key", "type": "auth"}}, status=401)
            self.authorized += 1
            return await handler(request)

        return guarded

    def error_for(self, kind: str, body: dict[str, Any]) -> tuple[int, str] | None:
        if self.echo_at is None or int(body.get("max_tokens") or 0) != self.echo_tokens:
            return None
        self._generations += 1
        if self._generations != self.echo_at:
            return None
        self.echoed += 1
        return 500, f"upstream rejected the credential {self.key} (expired)"
