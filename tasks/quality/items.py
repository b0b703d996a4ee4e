"""The quality step's task set: items generated from a seed, each with one exactly checkable answer.

The prompts are machine-parseable on purpose (fixed wording, values in quotes or after a colon), so a
test server or the simulator can answer them from the prompt alone (docs/PROTOCOL.md, "Answers").
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("kv_retrieval", "copy_reverse", "arithmetic", "sorting", "json_schema", "multi_turn_recall", "tool_call")
# How an answer is held against the expected one (tasks/quality/score.py `is_correct`).
MATCH_RULES = ("exact", "numeric", "json", "tool_args", "regex")  # regex: the user's eval set only

# A table line "key K3F9QX: 481273\n" is 19 characters. Where the engine has no tokenize endpoint, a line is
# estimated at 19 / 4 tokens (4 characters a token); real BPE tokenizers cut random keys and digits finer (about
# 11 tokens a line on SmolLM2's), so the engine's own count sizes the table wherever it can (quality/run.py).
_KV_CHARS_PER_LINE = 19
_KV_CHARS_PER_TOKEN = 4
ESTIMATED_TOKENS_PER_LINE = _KV_CHARS_PER_LINE / _KV_CHARS_PER_TOKEN

JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["name", "count"],
    "additionalProperties": False,
}
ALARM_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "set_alarm",
        "description": "Set an alarm.",
        "parameters": {
            "type": "object",
            "properties": {"hour": {"type": "integer"}, "minute": {"type": "integer"}, "label": {"type": "string"}},
            "required": ["hour", "minute", "label"],
        },
    },
}
_WORDS = ("tulip", "heron", "maple", "cobalt", "amber", "falcon", "willow", "quartz", "otter", "cedar", "lotus",
          "ember", "raven", "sable", "juniper", "orchid")


@dataclass(frozen=True)
class Item:
    id: str
    family: str
    messages: list[dict[str, Any]]  # the chat sent, every turn
    expected: Any  # a string, a number, a JSON value, or a tool call's arguments
    match: str  # one of MATCH_RULES
    tools: list[dict[str, Any]] = field(default_factory=list)
    schema: dict[str, Any] | None = None  # json_schema: the answer must also validate against it
    context_tokens: int | None = None  # kv_retrieval: the table's approximate length in tokens
    tolerance: float | None = None  # the user's eval set, match numeric: the last number in the answer, within this


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _token(rng: random.Random, n: int, alphabet: str = string.ascii_uppercase + string.digits) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def table_line(rng: random.Random) -> str:
    """One line of a kv_retrieval table, as the tables write them."""
    return f"key {_token(rng, 6)}: {rng.randint(100_000, 999_999)}"


def kv_retrieval(rng: random.Random, i: int, context_tokens: int,
                 tokens_per_line: float = ESTIMATED_TOKENS_PER_LINE) -> Item:
    """`context_tokens` of table (at `tokens_per_line`), then the question."""
    n = max(4, int(context_tokens / tokens_per_line))
    keys: list[str] = []
    while len(keys) < n:
        key = _token(rng, 6)
        if key not in keys:
            keys.append(key)
    values = [str(rng.randint(100_000, 999_999)) for _ in keys]
    asked = rng.randrange(n)
    table = "\n".join(f"key {k}: {v}" for k, v in zip(keys, values))
    text = (f"Below is a table of keys and values.\n{table}\n"
            f"What is the value of key {keys[asked]}? Answer with the value only.")
    return Item(f"kv_retrieval-{context_tokens}-{i}", "kv_retrieval", _user(text), values[asked], "exact",
                context_tokens=context_tokens)


def copy_reverse(rng: random.Random, i: int) -> Item:
    s = _token(rng, rng.randint(6, 10), string.ascii_lowercase)
    if i % 2:
        text = f'Reverse the string "{s}" (last character first). Answer with the reversed string only.'
        return Item(f"copy_reverse-{i}", "copy_reverse", _user(text), s[::-1], "exact")
    text = f'Copy the string "{s}" exactly. Answer with the string only.'
    return Item(f"copy_reverse-{i}", "copy_reverse", _user(text), s, "exact")


def arithmetic(rng: random.Random, i: int) -> Item:
    op = "+-*"[i % 3]
    a, b = (rng.randint(10, 99), rng.randint(2, 19)) if op == "*" else (rng.randint(10, 999), rng.randint(10, 999))
    value = a + b if op == "+" else a - b if op == "-" else a * b
    text = f"What is {a} {op} {b}? Answer with the number only."
    return Item(f"arithmetic-{i}", "arithmetic", _user(text), value, "numeric")


def sorting(rng: random.Random, i: int) -> Item:
    numbers = rng.sample(range(1, 100), rng.randint(5, 8))
    text = (f"Sort these numbers in ascending order: {', '.join(map(str, numbers))}. "
            "Answer with a JSON array only.")
    return Item(f"sorting-{i}", "sorting", _user(text), sorted(numbers), "json")


def json_schema(rng: random.Random, i: int) -> Item:
    name, count = rng.choice(_WORDS), rng.randint(1, 99)
    text = (f"Answer with a JSON object only, valid for this JSON schema: {json.dumps(JSON_SCHEMA)}. "
            f'Set name to "{name}" and count to {count}.')
    return Item(f"json_schema-{i}", "json_schema", _user(text), {"name": name, "count": count}, "json",
                schema=JSON_SCHEMA)


def multi_turn_recall(rng: random.Random, i: int) -> Item:
    projects = rng.sample(_WORDS, 3)
    codes = [rng.choice(_WORDS) + str(rng.randint(10, 99)) for _ in projects]
    facts = " ".join(f'The code word for project {p} is "{c}".' for p, c in zip(projects, codes))
    asked = rng.randrange(3)
    messages = [
        {"role": "user", "content": f"Please remember these facts. {facts}"},
        {"role": "assistant", "content": "I will remember them."},
        {"role": "user", "content": f"What is the code word for project {projects[asked]}? "
                                    "Answer with the code word only."},
    ]
    return Item(f"multi_turn_recall-{i}", "multi_turn_recall", messages, codes[asked], "exact")


def tool_call(rng: random.Random, i: int) -> Item:
    hour, minute, label = rng.randint(0, 23), rng.randint(0, 59), rng.choice(_WORDS)
    text = f'Set an alarm for {hour:02d}:{minute:02d} labelled "{label}" using the set_alarm tool.'
    return Item(f"tool_call-{i}", "tool_call", _user(text), {"hour": hour, "minute": minute, "label": label},
                "tool_args", tools=[ALARM_TOOL])


_MAKERS = {"copy_reverse": copy_reverse, "arithmetic": arithmetic, "sorting": sorting, "json_schema": json_schema,
           "multi_turn_recall": multi_turn_recall, "tool_call": tool_call}


def generate(seed: int, items_per_family: int, kv_context_tokens: list[int] | tuple[int, ...],
             tokens_per_line: float = ESTIMATED_TOKENS_PER_LINE) -> list[Item]:
    """The task set of a seed: the same items, in the same order, on every engine and every run with the same
    tokenizer. kv_retrieval has `items_per_family` items at each of `kv_context_tokens`, its tables sized at
    `tokens_per_line` (the engine's measure, or the estimate)."""
    items: list[Item] = []
    for family in FAMILIES:
        rng = random.Random(f"{seed}:{family}")  # a family's items do not move when another family changes
        if family == "kv_retrieval":
            items += [kv_retrieval(rng, i, length, tokens_per_line) for length in kv_context_tokens
                      for i in range(items_per_family)]
            continue
        items += [_MAKERS[family](rng, i) for i in range(items_per_family)]
    return items
