"""What the simulated model answers: deterministic words, needles, images, tool calls.

Every output word is a vocabulary word of at most 4 letters, so each is exactly one token.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
from dataclasses import dataclass
from typing import Any

from tasks.sim.tokenizer import count_tokens

_WORDS = (
    "the of and to in is it on for as with was that be by at this from or an are "
    "not but all we can one so if has her his had you may new more some time when "
    "out up into also only two over such way even most made like just back well"
).split()
_THINK = "let me see so the user asks for this then i will answer it now ok".split()

NEEDLE_RE = re.compile(r"The secret code is ([A-Z0-9-]+)\.")


def words(n: int, offset: int = 0, vocabulary: tuple[str, ...] | list[str] = _WORDS) -> list[str]:
    """n output tokens as text pieces: the first bare, the rest with a leading space."""
    out = []
    for i in range(n):
        w = vocabulary[(offset + i) % len(vocabulary)]
        out.append(w if i == 0 else " " + w)
    return out


def reasoning_words(n: int) -> list[str]:
    return words(n, 0, _THINK)


# ---- needles -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Needle:
    code: str
    depth: float  # character position of the needle / prompt length


def find_needle(prompt: str) -> Needle | None:
    """A needle sentence, when the prompt also ends with a question about the secret code."""
    match = NEEDLE_RE.search(prompt)
    if not match:
        return None
    question = prompt[max(match.end(), len(prompt) - 1000) :]
    if "secret code" not in question.lower() or "?" not in question:
        return None
    return Needle(match.group(1), match.start() / max(1, len(prompt)))


def wrong_code(code: str) -> str:
    """A different code of the same shape: letters and digits each shifted by one."""
    out = []
    for ch in code:
        if ch.isdigit():
            out.append(str((int(ch) + 1) % 10))
        elif ch.isalpha():
            out.append(chr((ord(ch) - 65 + 1) % 26 + 65))
        else:
            out.append(ch)
    return "".join(out)


# ---- images --------------------------------------------------------------------------------
class ImageError(ValueError):
    pass


def describe_image(url: str) -> tuple[str, int, int]:
    """(mime, width, height) read from the bytes of a data URL (PNG or JPEG headers)."""
    if not url.startswith("data:"):
        raise ImageError("image_url: only data URLs (data:image/png;base64,...) can be read here")
    header, _, payload = url.partition(",")
    try:
        raw = base64.b64decode(payload, validate=False) if ";base64" in header else payload.encode()
    except (binascii.Error, ValueError) as exc:
        raise ImageError(f"image_url: base64 payload does not decode ({exc})") from None
    if raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR":
        width, height = struct.unpack(">II", raw[16:24])
        return "image/png", width, height
    if raw[:2] == b"\xff\xd8":
        return ("image/jpeg", *_jpeg_size(raw))
    raise ImageError("image_url: not a PNG or JPEG image (unknown header bytes)")


def _jpeg_size(raw: bytes) -> tuple[int, int]:
    i = 2
    while i + 9 < len(raw):
        if raw[i] != 0xFF:
            i += 1
            continue
        marker = raw[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
            i += 1 if marker == 0xFF else 2
            continue
        length = struct.unpack(">H", raw[i + 2 : i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", raw[i + 5 : i + 9])
            return width, height
        i += 2 + length
    raise ImageError("image_url: JPEG without a frame header (SOF)")


def image_tokens(width: int, height: int) -> int:
    """Prompt tokens an image costs: one per 28x28 patch, at least 1."""
    return max(1, -(-width // 28) * -(-height // 28))


# ---- tool calls ----------------------------------------------------------------------------
def pick_tool(tools: list[dict[str, Any]], tool_choice: Any) -> dict[str, Any] | None:
    """The tool to call, or None when tool_choice is "none"."""
    if not tools or tool_choice == "none":
        return None
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        for tool in tools:
            if (tool.get("function") or {}).get("name") == name:
                return tool["function"]
        raise ValueError(f"tool_choice: no tool named {name!r} in tools")
    return tools[0].get("function") or {}


def example_value(schema: dict[str, Any], name: str = "value") -> Any:
    """A value valid for a JSON schema: enums honoured, required properties filled with their type."""
    if not isinstance(schema, dict):
        return "example"
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return example_value(schema[key][0], name)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties") or {}
        wanted = schema.get("required") or list(props)
        return {key: example_value(props.get(key, {}), key) for key in wanted}
    if kind == "array":
        return [example_value(schema.get("items") or {}, name)] * max(1, int(schema.get("minItems", 1)))
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.5))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = f"example {name}"
    return text.ljust(int(schema.get("minLength", 0)), "x")


def tool_arguments(function: dict[str, Any]) -> str:
    return json.dumps(example_value(function.get("parameters") or {"type": "object"}))


def fragments(text: str, size: int = 8) -> list[str]:
    """Tool-call arguments split as a real engine streams them."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def text_tokens(text: str) -> int:
    return max(1, count_tokens(text))
