"""Reading an OpenAI-style request into what the engine needs, and planning the answer.

Chat prompts are rendered with the simulator's own template, whose tokens count like any text:
``<|role|> content <|end|> `` per message (4 tokens plus the content's), the tools as JSON after
``<|tools|>``, then ``<|assistant|>`` (4 tokens). An image costs one token per 28x28 patch.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from tasks.sim import content as answers
from tasks.sim.dialects import Dialect
from tasks.config.sim_profile import Profile
from tasks.sim.solver import solve
from tasks.sim.tokenizer import decode, pieces

_UNIT = re.compile(r"\s*\S{1,4}")


class RequestError(ValueError):
    """A request the engine rejects with HTTP 400; the message names the field."""


@dataclass
class Prompt:
    text: str  # what a needle is searched in, and what echo returns
    tokens: list[Any]  # token pieces (or ids): counted, and hashed by the prefix cache
    images: list[tuple[str, int, int]] = field(default_factory=list)
    tool: dict[str, Any] | None = None

    @property
    def count(self) -> int:
        return len(self.tokens)


@dataclass
class Answer:
    reasoning: list[str]  # one token per item
    content: list[str]
    tool: dict[str, Any] | None  # {"id", "name", "arguments"}
    tool_fragments: list[str]
    finish_reason: str
    completion_tokens: int
    max_tokens: int | None


def render_chat(messages: Any, tools: Any = None) -> Prompt:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: expected a non-empty list of {role, content} objects")
    parts: list[str] = []
    texts: list[str] = []
    images: list[tuple[str, int, int]] = []
    image_tokens: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise RequestError(f"messages[{i}]: expected an object with 'role' and 'content'")
        body = message.get("content")
        if body is None:
            text = ""
        elif isinstance(body, str):
            text = body
        elif isinstance(body, list):
            chunks = []
            for j, part in enumerate(body):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text":
                    chunks.append(str(part.get("text", "")))
                elif kind == "image_url":
                    url = part.get("image_url")
                    url = url.get("url") if isinstance(url, dict) else url
                    try:
                        mime, w, h = answers.describe_image(str(url or ""))
                    except answers.ImageError as exc:
                        raise RequestError(f"messages[{i}].content[{j}].{exc}") from None
                    images.append((mime, w, h))
                    tag = "<img%08x>" % zlib.crc32(str(url).encode())
                    image_tokens.extend([tag] * answers.image_tokens(w, h))
                else:
                    raise RequestError(f"messages[{i}].content[{j}].type: {kind!r} is not supported (use text or image_url)")
            text = "\n".join(chunks)
        else:
            raise RequestError(f"messages[{i}].content: expected a string or a list of parts")
        texts.append(text)
        parts.append(f"<|{message['role']}|> {text} <|end|> ")
    if tools:
        parts.insert(0, f"<|tools|> {json.dumps(tools)} <|end|> ")
    parts.append("<|assistant|>")
    return Prompt("\n".join(texts), pieces("".join(parts)) + image_tokens, images)


def read_completion_prompt(prompt: Any) -> Prompt:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return Prompt(prompt, pieces(prompt))
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if not prompt:
            raise RequestError("prompt: the token id list is empty")
        return Prompt(decode(prompt), list(prompt))
    raise RequestError("prompt: expected a string or a list of token ids (batches of several prompts are not supported)")


def _int_field(body: dict[str, Any], name: str, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise RequestError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return value


def check_context(profile: Profile, dialect: Dialect, prompt_tokens: int,
                  max_tokens: int | None) -> tuple[str, str | None] | None:
    """The real engine's 400 (message, param) when a request does not fit the context window, else None.

    vLLM 0.32 refuses max_tokens over the window, then a prompt over it (counted up to limit + 1), then a prompt
    that fills it (no room for one token); a prompt that fits with max_tokens over the room left is served, cut
    to that room (plan_answer). SGLang 0.5.18 refuses a prompt that fills the window, and a prompt plus max_tokens
    over it. The plain OpenAI API refuses both in one wording."""
    limit = profile.context_limit
    if dialect.context_check == "vllm":
        if max_tokens is not None and max_tokens > limit:
            return (f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. Please request fewer "
                    f"output tokens. (parameter=max_tokens, value={max_tokens})", "max_tokens")
        if prompt_tokens > limit:
            return (f"This model's maximum context length is {limit} tokens. However, your prompt contains at least "
                    f"{limit + 1} input tokens, which exceeds this limit even without any output tokens. Please "
                    f"reduce the length of the input prompt. (parameter=input_tokens, value={limit + 1})",
                    "input_tokens")
        if prompt_tokens == limit:
            return "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)", "max_tokens"
        return None
    wanted = prompt_tokens + (max_tokens or 0)
    if dialect.context_check == "sglang":
        if prompt_tokens >= limit:
            return (f"The input ({prompt_tokens} tokens) is longer than the model's context length ({limit} tokens).",
                    None)
        if wanted > limit:
            return (f"Requested token count exceeds the model's maximum context length of {limit} tokens. You "
                    f"requested a total of {wanted} tokens: {prompt_tokens} tokens from the input messages and "
                    f"{max_tokens} tokens for the completion. Please reduce the number of tokens in the input "
                    "messages or the completion to fit within the limit.", None)
        return None
    if prompt_tokens >= limit or wanted > limit:
        return (
            f"This model's maximum context length is {limit} tokens. However, you requested {wanted} tokens "
            f"({prompt_tokens} in the messages, {max_tokens or 0} in the completion). "
            "Please reduce the length of the messages or completion.", None
        )
    return None


def max_tokens_of(body: dict[str, Any]) -> int | None:
    given = _int_field(body, "max_completion_tokens", 1)
    return given if given is not None else _int_field(body, "max_tokens", 1)


def plan_answer(profile: Profile, dialect: Dialect, body: dict[str, Any], prompt: Prompt, chat: bool) -> Answer:
    given_max = max_tokens_of(body)
    room = max(1, profile.context_limit - prompt.count)
    limit = given_max if given_max is not None else room
    if dialect.context_check == "vllm":
        limit = min(limit, room)  # vLLM serves what fits and finishes with length
    min_tokens = _int_field(body, "min_tokens", 0) or 0
    ignore_eos = bool(body.get("ignore_eos"))
    thinking = chat and profile.reasoning and (dialect.reasoning_field is not None or profile.quirks.reasoning_field
                                              is not None or profile.quirks.reasoning_inline)

    solved = solve(prompt.text, profile.quality) if chat else None  # a quality item, answered from its prompt
    if chat and prompt.tool is not None:
        arguments = (json.dumps(solved.tool_arguments) if solved is not None and solved.tool_arguments is not None
                     else answers.tool_arguments(prompt.tool))
        frags = answers.fragments(arguments)
        call = {"id": "call_" + format(zlib.crc32(arguments.encode()), "08x"), "name": prompt.tool.get("name", ""), "arguments": arguments}
        return Answer([], [], call, frags, "tool_calls", 1 + len(frags), given_max)

    fixed: str | None = None
    needle = answers.find_needle(prompt.text)
    if solved is not None and solved.content is not None:
        fixed = solved.content
    elif needle:
        wrong = (profile.needle_max_depth is not None and needle.depth > profile.needle_max_depth) or (
            profile.needle_max_tokens is not None and prompt.count > profile.needle_max_tokens
        )
        fixed = answers.wrong_code(needle.code) if wrong else needle.code
    elif prompt.images:
        fixed = "I see " + "; ".join(f"{mime} {w}x{h}" for mime, w, h in prompt.images) + "."

    if fixed is not None:
        units = _UNIT.findall(fixed)
        n_reason = profile.reasoning_tokens if thinking else 0
        total = n_reason + len(units)
        n = min(total, limit)
        n_reason = min(n_reason, n)
        reasoning = answers.reasoning_words(n_reason)
        content = units[: n - n_reason]
        return Answer(reasoning, content, None, [], "length" if n < total else "stop", n, given_max)

    n = limit if ignore_eos else min(limit, max(profile.natural_output_tokens, min_tokens))
    n_reason = min(profile.reasoning_tokens, n - 1) if thinking and n > 1 else 0
    return Answer(
        answers.reasoning_words(n_reason),
        answers.words(n - n_reason, seed_offset(profile, prompt)),
        None,
        [],
        "length" if n == limit else "stop",
        n,
        given_max,
    )


def seed_offset(profile: Profile, prompt: Prompt) -> int:
    return (profile.seed + prompt.count) % 97
