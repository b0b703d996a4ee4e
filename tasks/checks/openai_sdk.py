"""The official openai Python SDK (what OpenWebUI-style frontends use) lists models, chats and streams.

A server can answer raw HTTP probes and still break the SDK (a missing field, an unexpected
event); this check drives the real client so SDK users' breakages show up.
"""

from __future__ import annotations

from typing import Any

from tasks.checks.base import FAIL, PASS, CheckResult, Probe, empty_content_reason, evidence

NAME = "openai_sdk"
PROMPT = "Name three colours of the rainbow."


def _steps(probe: Probe) -> tuple[str | None, dict[str, Any]]:
    """Run the three SDK calls; return (why it failed or None, what each call saw)."""
    import openai  # here, not at import: the SDK is 0.4 s of every `dayone` start (a runner pod per step)

    ep = probe.endpoint
    # the SDK sends its api_key as the Bearer token; its http client carries the endpoint's TLS trust
    client = openai.OpenAI(
        base_url=ep.base_url.rstrip("/") + "/v1", api_key=ep.access.api_key or "dayone", timeout=ep.request_timeout_s,
        max_retries=0, http_client=ep.http_client(),
    )
    seen: dict[str, Any] = {}
    with client:
        ids = [m.id for m in client.models.list()]
        seen["models"] = ids
        if ep.model not in ids:
            return f"models.list() does not name {ep.model!r}", seen
        messages = [{"role": "user", "content": PROMPT}]
        reply = client.chat.completions.create(model=ep.model, messages=messages, max_tokens=256, temperature=0)
        content = reply.choices[0].message.content or ""
        seen["chat"] = content[:80]
        if not content.strip():  # the SDK keeps a field it does not know (vLLM's reasoning) as an extra
            message = reply.choices[0].message.model_dump()
            adapter = ep.adapter
            return empty_content_reason(probe, "chat.completions.create() returned empty content",
                                        adapter.reasoning_text(message), adapter.reasoning_fields_in(message)), seen
        parts = []
        stream = client.chat.completions.create(model=ep.model, messages=messages, max_tokens=256, temperature=0, stream=True)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
        seen["stream"] = "".join(parts)[:80]
        if not "".join(parts).strip():
            return "the streamed chat.completions.create() yielded no content", seen
    return None, seen


def run(probe: Probe) -> CheckResult:
    import openai

    field = "openai.OpenAI: models.list, chat.completions.create (plain and stream=True)"
    try:
        why, seen = _steps(probe)
    except openai.APIStatusError as exc:
        return CheckResult(NAME, FAIL, evidence(exc.status_code, field, str(exc), f"SDK error: {type(exc).__name__}"))
    except (openai.OpenAIError, ValueError, TypeError, AttributeError) as exc:
        return CheckResult(NAME, FAIL, evidence(None, field, str(exc), f"SDK error: {type(exc).__name__}"))
    if why:
        return CheckResult(NAME, FAIL, evidence(200, field, seen, why, sdk_version=openai.__version__))
    return CheckResult(NAME, PASS, evidence(200, field, seen, "model listed, chat and streamed chat returned content",
                                            sdk_version=openai.__version__))
