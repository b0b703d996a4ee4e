"""Image input: a PNG made here, sent as a data URL; the answer must show the image was read.

The image is a solid colour of an unusual size. The answer shows it was read when it names the
colour, or states the exact size (what DayOne's simulator reports). A model that never saw the
image can do neither, bar a lucky guess of the colour.

A model without vision is not a failing engine: where the engine reports that the served model takes text only
(its adapter's `takes_images`: vLLM's /server_info, SGLang's /model_info), or refuses the image in its own words
for a text-only model (`text_only_refusal`, e.g. vLLM's 400 "... is not a multimodal model"), the check is
not_applicable and says which. An engine that says the model takes images, or says nothing, is judged.
"""

from __future__ import annotations

import base64
import re
import struct
import zlib

from tasks.checks.base import FAIL, NOT_APPLICABLE, PASS, CheckResult, Probe, evidence, first_message, request_failed
from tasks.engines.stream import JsonResult

NAME = "image_input"
WIDTH, HEIGHT = 64, 32
COLOUR_NAME, COLOUR_RGB = "red", (220, 20, 20)
PROMPT = "What is the main colour of this image? Answer in one word."


def png_bytes(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid-colour 8-bit RGB PNG, written with zlib and struct alone."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" + bytes(rgb) * width  # filter type 0 per scanline
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b"")


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def _text_only(probe: Probe, r: JsonResult) -> str | None:
    """Why the served model takes no images, as the engine says it; None where it does not say so."""
    adapter = probe.endpoint.adapter
    takes, source = adapter.takes_images(probe.client, probe.endpoint.base_url, probe.endpoint.model)
    if takes is False:
        return f"the engine reports that the model takes text only ({source} is false)"
    refused = r.status is not None and 400 <= r.status < 500 and adapter.text_only_refusal is not None
    if takes is None and refused and adapter.text_only_refusal.search(r.body_excerpt or ""):
        return f"the engine refused the image because the model takes text only ({r.body_excerpt})"
    return None


def run(probe: Probe) -> CheckResult:
    content = [
        {"type": "text", "text": PROMPT},
        {"type": "image_url", "image_url": {"url": data_url(png_bytes(WIDTH, HEIGHT, COLOUR_RGB))}},
    ]
    r = probe.chat(content)
    field = "choices[0].message.content"
    answer = ((first_message(r.body) or {}).get("content") or "") if r.ok else ""
    text_only = _text_only(probe, r)
    if text_only is not None:
        seen, how = ((answer, "it answered anyway, and a text-only model's answer cannot show the image was read")
                     if r.ok else (r.body_excerpt, f"it refused the image with HTTP {r.status}"))
        return CheckResult(NAME, NOT_APPLICABLE,
                           evidence(r.status, field, seen, f"not the engine's: {text_only}; {how}"))
    if not r.ok:
        return request_failed(NAME, r, field)
    size = f"{WIDTH}x{HEIGHT}"
    names_colour = re.search(rf"\b{COLOUR_NAME}\b", answer, re.IGNORECASE) is not None
    if names_colour or size in answer:
        how = f"names the colour {COLOUR_NAME}" if names_colour else f"states the size {size}"
        return CheckResult(NAME, PASS, evidence(r.status, field, answer, f"the answer {how}"))
    return CheckResult(NAME, FAIL, evidence(r.status, field, answer,
                                            f"the answer neither names the colour ({COLOUR_NAME}) nor the size ({size})"))
