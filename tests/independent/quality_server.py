"""A plain server that answers the quality step's items from their prompts, written for the tests apart
from DayOne's simulator and from tasks/quality: its solver is the test's own reading of the prompts."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web
from plain_server import PlainServer


def solve(messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None]:
    """(content, tool call arguments or None): the right answer to the last user message."""
    question = messages[-1]["content"]
    earlier = " ".join(m["content"] for m in messages[:-1])
    if m := re.search(r"What is the value of key (\w+)\?", question):
        return dict(re.findall(r"key (\w+): (\d+)", question))[m.group(1)], None
    if m := re.search(r'Copy the string "(\w+)" exactly', question):
        return m.group(1), None
    if m := re.search(r'Reverse the string "(\w+)"', question):
        return m.group(1)[::-1], None
    if m := re.search(r"What is (-?\d+) ([-+*]) (-?\d+)\?", question):
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        return str(a + b if op == "+" else a - b if op == "-" else a * b), None
    if m := re.search(r"ascending order: ([\d, ]+)\.", question):
        return json.dumps(sorted(int(x) for x in m.group(1).split(","))), None
    if m := re.search(r'Set name to "(\w+)" and count to (\d+)\.', question):
        return json.dumps({"name": m.group(1), "count": int(m.group(2))}), None
    if m := re.search(r"code word for project (\w+)\?", question):
        return dict(re.findall(r'project (\w+) is "(\w+)"', earlier))[m.group(1)], None
    if m := re.search(r'alarm for (\d+):(\d+) labelled "(\w+)"', question):
        return "", {"hour": int(m.group(1)), "minute": int(m.group(2)), "label": m.group(3)}
    return "I do not know.", None


class SolvesEverything(PlainServer):
    """Answers every item right (non-streamed chat only: what the quality step sends). As greedy decoding does, it
    gives a request asked again the answer it gave the first time (`corrupt` decides once per request), unless
    `deterministic` is off."""

    deterministic = True

    def __init__(self) -> None:
        super().__init__()
        self.temperatures: list[Any] = []
        self.families_asked: list[str] = []
        self.answered: dict[str, tuple[str, dict[str, Any] | None]] = {}
        self.asked: list[str] = []  # each request's last user message, repeats included

    def corrupt(self, question: str, content: str, tool: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
        return content, tool

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.temperatures.append(body.get("temperature", "unset"))
        key = json.dumps([body["messages"], body.get("tools")], sort_keys=True)
        self.asked.append(body["messages"][-1]["content"])
        if self.deterministic and key in self.answered:
            content, tool = self.answered[key]
        else:
            content, tool = self.answered[key] = self.corrupt(body["messages"][-1]["content"], *solve(body["messages"]))
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool is not None:
            name = body["tools"][0]["function"]["name"]
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": name, "arguments": json.dumps(tool)}}]}
        return web.json_response({"id": "plain", "object": "chat.completion", "model": self.model,
                                  "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


class CorruptsHalfTheArithmetic(SolvesEverything):
    """Every other arithmetic answer is off by one; every other family is answered right."""

    def __init__(self) -> None:
        super().__init__()
        self.arithmetic_seen = 0
        self.arithmetic_corrupted = 0

    def corrupt(self, question: str, content: str, tool: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
        if re.search(r"What is -?\d+ [-+*] -?\d+\?", question):
            self.arithmetic_seen += 1
            if self.arithmetic_seen % 2:
                self.arithmetic_corrupted += 1
                return str(int(content) + 1), None
        return content, tool


class MissesProducts(SolvesEverything):
    """Every product is off by one (items hard for any engine); everything else is right."""

    def corrupt(self, question: str, content: str, tool: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
        if re.search(r"What is -?\d+ \* -?\d+\?", question):
            return str(int(content) + 1), None
        return content, tool


class MissesProductsAndThreeSums(MissesProducts):
    """As MissesProducts, and the first three sums are off by one too: the planted difference."""

    def __init__(self) -> None:
        super().__init__()
        self.sums_corrupted: list[str] = []

    def corrupt(self, question: str, content: str, tool: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
        if re.search(r"What is -?\d+ \+ -?\d+\?", question) and len(self.sums_corrupted) < 3:
            self.sums_corrupted.append(question)
            return str(int(content) + 1), None
        return super().corrupt(question, content, tool)
