"""The user's own eval set: a JSONL file (an S3 object or a path), one item a line with a prompt or
messages, the expected answer and its match rule; read and checked at plan, every bad row named by its
line, and scored as the `eval_set` family (docs/PROTOCOL.md, "Your own eval set")."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from tasks.config import ConfigError
from tasks.quality.items import Item

FAMILY = "eval_set"
FIELD = "scenarios.quality.eval_set"
MATCH_RULES = ("exact", "regex", "numeric")
_KEYS = {"id", "prompt", "messages", "expected", "match", "tolerance"}
_ROW_FIX = ('make each line a JSON object: {"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]}, '
            '"expected", and "match" one of exact, regex, numeric (numeric may give "tolerance" >= 0)')


def _row_problem(row: Any) -> str | None:
    """What is wrong with one parsed line, or None."""
    if not isinstance(row, dict):
        return "not a JSON object"
    unknown = sorted(set(row) - _KEYS)
    if unknown:
        return f"unknown fields {unknown}"
    if ("prompt" in row) == ("messages" in row):
        return 'give either "prompt" or "messages"'
    if "prompt" in row and (not isinstance(row["prompt"], str) or not row["prompt"].strip()):
        return '"prompt" must be a non-empty string'
    messages = row.get("messages")
    if "messages" in row and (not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
            and isinstance(m.get("content"), str) for m in messages)):
        return '"messages" must be a non-empty list of {"role": system|user|assistant, "content": text}'
    if "expected" not in row or row["expected"] is None:
        return 'no "expected" answer'
    match = row.get("match", "exact")
    if match not in MATCH_RULES:
        return f'"match" {match!r} is not one of {", ".join(MATCH_RULES)}'
    expected = row["expected"]
    if match == "numeric":
        if isinstance(expected, bool) or not isinstance(expected, (int, float, str)) or _number(str(expected)) is None:
            return f'"expected" {expected!r} is not a number, as match numeric needs'
        tolerance = row.get("tolerance", 0)
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0:
            return f'"tolerance" {tolerance!r} is not a number >= 0'
    elif "tolerance" in row:
        return '"tolerance" is for match numeric only'
    elif not isinstance(expected, str):
        return f'"expected" must be a string for match {match}'
    elif match == "regex":
        try:
            re.compile(expected)
        except re.error as exc:
            return f'"expected" is not a valid regular expression ({exc})'
    return None


def _number(text: str) -> float | None:
    try:
        value = float(text.replace(",", "").strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_eval_set(text: str, source: str = "the eval set") -> list[Item]:
    """The items of a JSONL text; ConfigError naming every bad line (1-based) and the fix. Blank lines are skipped."""
    items: list[Item] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: not JSON ({exc.msg})")
            continue
        problem = _row_problem(row)
        item_id = f"{FAMILY}-{row.get('id', number)}" if isinstance(row, dict) else ""
        if problem is None and item_id in seen:
            problem = f"id {row.get('id')!r} also on line {seen[item_id]}"
        if problem:
            problems.append(f"line {number}: {problem}")
            continue
        seen[item_id] = number
        messages = row.get("messages") or [{"role": "user", "content": row["prompt"]}]
        match = row.get("match", "exact")
        expected = _number(str(row["expected"])) if match == "numeric" else row["expected"]
        items.append(Item(item_id, FAMILY, messages, expected, match,
                          tolerance=float(row.get("tolerance", 0)) if match == "numeric" else None))
    if problems:
        shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more bad lines" if len(problems) > 10 else "")
        raise ConfigError([(FIELD, f"{source}: {shown}", _ROW_FIX)])
    if not items:
        raise ConfigError([(FIELD, f"{source} holds no items", _ROW_FIX)])
    return items


def read_eval_set(source: str, s3: Any = None) -> str:
    """The JSONL text of `source`: s3://BUCKET/KEY read with the `s3` client, else a local path."""
    if source.startswith("s3://"):
        bucket, _, key = source.removeprefix("s3://").partition("/")
        if s3 is None:
            raise ConfigError([(FIELD, f"{source} is on S3 but this run has no archive client",
                                "give the run an S3 connection (the DAG's archive connection, or AWS_* for the CLI)")])
        try:
            return s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8")
        except Exception as exc:  # botocore's errors: a missing key or bucket, no access
            raise ConfigError([(FIELD, f"{source} could not be read ({type(exc).__name__}: {str(exc)[:200]})",
                                "name an object the run's S3 credentials can read")]) from None
    path = Path(source)
    if not path.is_file():
        raise ConfigError([(FIELD, f"{source} is not a file", "give s3://BUCKET/KEY.jsonl or a readable path")])
    return path.read_text(encoding="utf-8")


def items_as_json(items: list[Item]) -> list[dict[str, Any]]:
    """The items as the plan keeps them in the run state, so every engine's step scores the same ones."""
    return [{"id": i.id, "messages": i.messages, "expected": i.expected, "match": i.match, "tolerance": i.tolerance}
            for i in items]


def items_from_json(rows: list[dict[str, Any]]) -> list[Item]:
    return [Item(r["id"], FAMILY, r["messages"], r["expected"], r["match"], tolerance=r.get("tolerance"))
            for r in rows]
