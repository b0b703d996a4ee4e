"""What every functional check shares: its result, and a probe of the endpoint under test.

A check returns pass, fail or not_applicable with its evidence: the HTTP status, the field it
looked at, and a short excerpt of what came back (PROTOCOL.md section 4). A 200 is not a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from tasks.engines.context import EngineEndpoint
from tasks.engines.stream import JsonResult, StreamResult, excerpt, post_json, stream_post

PASS, FAIL, NOT_APPLICABLE = "pass", "fail", "not_applicable"
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
# Generous enough for a reasoning model to finish thinking and answer.
CHAT_MAX_TOKENS = 256


@dataclass(frozen=True)
class CheckResult:
    check: str
    outcome: str  # pass | fail | not_applicable
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.outcome not in (PASS, FAIL, NOT_APPLICABLE):
            raise ValueError(f"outcome must be pass, fail or not_applicable, got {self.outcome!r}")


def evidence(status: int | None, field_seen: str, seen: Any, reason: str, **extra: Any) -> dict[str, Any]:
    """The evidence every check records: status, field, excerpt, and why it passed or failed."""
    return {"status": status, "field": field_seen, "excerpt": excerpt(seen if isinstance(seen, str) else repr(seen)),
            "reason": reason, **extra}


@dataclass
class Probe:
    """The endpoint under test and one HTTP client for all checks."""

    endpoint: EngineEndpoint
    client: httpx.Client
    model_reasons: bool | None = None  # the run config's model.reasoning: what the user knows of the model

    def url(self, path: str) -> str:
        return self.endpoint.base_url.rstrip("/") + path

    def get(self, path: str) -> JsonResult:
        try:
            r = self.client.get(self.url(path))
        except httpx.HTTPError as exc:
            return JsonResult(None, error=f"{type(exc).__name__}: {exc}")
        try:
            body = r.json()
        except ValueError:
            return JsonResult(r.status_code, None, error="response is not JSON", body_excerpt=excerpt(r.text))
        return JsonResult(r.status_code, body, error=None if r.status_code == 200 else f"HTTP {r.status_code}",
                          body_excerpt=excerpt(r.text))

    # Greedy unless a check says otherwise: a check's verdict must not be a draw of the sampler.
    def post(self, path: str, payload: dict[str, Any]) -> JsonResult:
        return post_json(self.client, self.url(path), {"model": self.endpoint.model, "temperature": 0.0, **payload})

    def stream(self, path: str, payload: dict[str, Any]) -> StreamResult:
        return stream_post(self.client, self.url(path),
                           {"model": self.endpoint.model, "temperature": 0.0, **payload}, self.endpoint.adapter)

    def chat(self, content: str | list[dict[str, Any]], **extra: Any) -> JsonResult:
        return self.post(CHAT_PATH, {"messages": [{"role": "user", "content": content}],
                                     "max_tokens": CHAT_MAX_TOKENS, **extra})

    def chat_stream(self, content: str | list[dict[str, Any]], **extra: Any) -> StreamResult:
        return self.stream(CHAT_PATH, {"messages": [{"role": "user", "content": content}],
                                       "max_tokens": CHAT_MAX_TOKENS, **extra})


def first_message(body: Any) -> dict[str, Any] | None:
    """choices[0].message of a chat response, or None when the shape is wrong."""
    try:
        message = body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    return message if isinstance(message, dict) else None


def request_failed(check: str, result: JsonResult | StreamResult, field_seen: str) -> CheckResult:
    """The fail result for a request that did not even return 200."""
    return CheckResult(check, FAIL, evidence(result.status, field_seen, result.body_excerpt,
                                             f"request failed: {result.error}"))


def empty_content_reason(probe: Probe, what: str, reasoning: str, fields: list[str] | tuple[str, ...]) -> str:
    """Why a reply had no content, in words: where all its output came as reasoning, that is the engine's
    reasoning parser at work (a parser on a model that does not reason takes every token, and its grammars
    start only after a thought ends), which the run config can change; the check still fails."""
    if not reasoning.strip():
        return what
    where = " and ".join(fields) or "a reasoning field"
    said = ("the run config says the model does not reason (model.reasoning: false), so the engine's reasoning "
            "parser is misconfigured: drop it from the engine's args" if probe.model_reasons is False else
            "a reasoning parser took the whole reply: where the model does not reason, drop the parser from the "
            "engine's args (or set model.reasoning: true if it does and the budget ran out in its thought)")
    return f"{what}: all {len(reasoning)} characters of output came as reasoning ({where}); {said}"

