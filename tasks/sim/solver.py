"""What the simulated model answers to the quality step's items: read from the prompt text alone, as a
model would, right unless the profile plants a wrong share of a family (Profile.quality)."""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from typing import Any

from tasks.sim.content import wrong_code
from tasks.config.sim_profile import QualityPlant


@dataclass(frozen=True)
class Solved:
    family: str
    content: str | None  # the answer text; None for a tool call
    tool_arguments: dict[str, Any] | None = None


def _read(text: str) -> Solved | None:
    """The right answer to the prompt's task, or None when the prompt is no quality item."""
    if m := re.search(r"What is the value of key (\w+)\?", text):
        value = dict(re.findall(r"key (\w+): (\d+)", text)).get(m.group(1))
        return Solved("kv_retrieval", value) if value is not None else None
    if m := re.search(r'Copy the string "(\w+)" exactly', text):
        return Solved("copy_reverse", m.group(1))
    if m := re.search(r'Reverse the string "(\w+)"', text):
        return Solved("copy_reverse", m.group(1)[::-1])
    if m := re.search(r"What is (-?\d+) ([-+*]) (-?\d+)\?", text):
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        return Solved("arithmetic", str(a + b if op == "+" else a - b if op == "-" else a * b))
    if m := re.search(r"ascending order: ([\d, ]+)\. Answer with a JSON array", text):
        return Solved("sorting", json.dumps(sorted(int(x) for x in m.group(1).split(","))))
    if m := re.search(r'Set name to "(\w+)" and count to (\d+)\.', text):
        return Solved("json_schema", json.dumps({"name": m.group(1), "count": int(m.group(2))}))
    if m := re.search(r"What is the code word for project (\w+)\?", text):
        code = dict(re.findall(r'code word for project (\w+) is "(\w+)"', text)).get(m.group(1))
        return Solved("multi_turn_recall", code) if code is not None else None
    if m := re.search(r'Set an alarm for (\d+):(\d+) labelled "(\w+)"', text):
        return Solved("tool_call", None, {"hour": int(m.group(1)), "minute": int(m.group(2)), "label": m.group(3)})
    return None


def _wrong(solved: Solved) -> Solved:
    """A wrong answer of the same shape: a number off by one, a string shifted, a list out of order."""
    family, content = solved.family, solved.content or ""
    if family == "arithmetic":
        return Solved(family, str(int(content) + 1))
    if family == "sorting":
        numbers = json.loads(content)
        return Solved(family, json.dumps([numbers[1], numbers[0], *numbers[2:]]))
    if family == "json_schema":
        doc = json.loads(content)
        return Solved(family, json.dumps({**doc, "count": doc["count"] + 1}))
    if family == "tool_call":
        args = solved.tool_arguments or {}
        return Solved(family, None, {**args, "minute": (args.get("minute", 0) + 1) % 60})
    return Solved(family, wrong_code(content.upper()).lower() if content.islower() else wrong_code(content))


def solve(text: str, plant: QualityPlant) -> Solved | None:
    """The simulator's answer to a quality item: right, or wrong for the planted share of its family
    (an item is in the share when the CRC-32 of its prompt falls below it: the same items on every run)."""
    solved = _read(text)
    if solved is None:
        return None
    share = plant.wrong_share.get(solved.family, 0.0)
    return _wrong(solved) if zlib.crc32(text.encode()) < share * 2**32 else solved
