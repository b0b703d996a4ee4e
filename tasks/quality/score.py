"""Each answer's verdict under its item's match rule, and accuracy per family with a Wilson interval
(docs/PROTOCOL.md, "Answers")."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from tasks.quality.items import Item

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")  # "1,234.5": the eval set's numeric rule
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def _json_value(text: str) -> Any:
    """The JSON value of an answer; a Markdown code fence around it is allowed (models often add one)."""
    text = text.strip()
    fenced = _FENCE.match(text)
    return json.loads(fenced.group(1) if fenced else text)


def is_correct(item: Item, answer: str) -> bool:
    """Whether `answer` (the content, or a tool call's arguments JSON) is the item's expected answer."""
    try:
        if item.match == "exact":
            return answer.strip() == str(item.expected)
        if item.match == "regex":
            return re.search(str(item.expected), answer) is not None
        if item.match == "numeric" and item.tolerance is not None:
            numbers = _NUMBER.findall(answer)
            return bool(numbers) and abs(float(numbers[-1].replace(",", "")) - float(item.expected)) <= item.tolerance
        if item.match == "numeric":
            value = float(answer.strip())
            return math.isfinite(value) and abs(value - float(item.expected)) <= 1e-9 * max(1.0, abs(item.expected))
        if item.match in ("json", "tool_args"):
            value = _json_value(answer)
            if value != item.expected:
                return False
            if item.schema is not None:
                import jsonschema

                return jsonschema.Draft202012Validator(item.schema).is_valid(value)
            return True
    except (ValueError, TypeError):  # not a number, or not JSON
        return False
    raise ValueError(f"unknown match rule {item.match!r}")


def accuracy_by_family(rows: Iterable[dict[str, Any]],
                       confidence: float = 0.95) -> dict[str, dict[str, dict[str, Any]]]:
    """engine -> family -> items, correct, accuracy and its Wilson interval, from `quality` rows.
    An item whose request failed counts as wrong: the user got no right answer."""
    from tasks.stats.intervals import wilson

    counts: dict[str, dict[str, list[int]]] = {}
    for r in rows:
        tally = counts.setdefault(r["engine"], {}).setdefault(r["family"], [0, 0])
        tally[0] += bool(r["correct"])
        tally[1] += 1
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for engine, families in counts.items():
        for family, (good, n) in families.items():
            low, high = wilson(good, n, confidence)
            out.setdefault(engine, {})[family] = {"items": n, "correct": good, "accuracy": good / n,
                                                  "low": low, "high": high, "confidence": confidence}
    return out
