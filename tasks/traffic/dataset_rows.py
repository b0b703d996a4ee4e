"""The user's dataset rows (PROTOCOL.md "Your own prompts"): one JSON object a line, `prompt` (text) or
`messages` (a chat), with an optional `max_tokens`; parsed as they stream, a bad row named by its line."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tasks.config import ConfigError, RunConfig
from tasks.traffic.traffic_file import file_lines

FIELD = "scenarios.dataset"
ROLES = ("system", "user", "assistant", "tool", "developer")
ROW_FIX = ('write one JSON object a line: {"prompt": "text"} or {"messages": [{"role": "user", "content": '
           '"text"}, ...]}, with an optional "max_tokens": a whole number >= 1')


@dataclass(frozen=True)
class DatasetRow:
    """One row as the engine gets it: exactly one of `prompt` and `messages`."""

    line: int
    prompt: str | None
    messages: tuple[dict[str, Any], ...] | None
    max_tokens: int | None


class DatasetError(ValueError):
    def __init__(self, line: int, problem: str):
        super().__init__(f"line {line}: {problem}")
        self.line, self.problem = line, problem


def parse_row(line: int, text: bytes | str) -> DatasetRow | None:
    """A row of `text`; None for a blank line; DatasetError naming the problem."""
    if not text.strip():
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise DatasetError(line, f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise DatasetError(line, f"a JSON {type(doc).__name__}, not an object")
    has_prompt, has_messages = "prompt" in doc, "messages" in doc
    if has_prompt == has_messages:
        raise DatasetError(line, "both prompt and messages" if has_prompt else "neither prompt nor messages")
    max_tokens = doc.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise DatasetError(line, f"max_tokens {max_tokens!r} is not a whole number >= 1")
    if has_prompt:
        if not isinstance(doc["prompt"], str) or not doc["prompt"].strip():
            raise DatasetError(line, "prompt is not a non-empty string")
        return DatasetRow(line, doc["prompt"], None, max_tokens)
    messages = doc["messages"]
    if not isinstance(messages, list) or not messages:
        raise DatasetError(line, "messages is not a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise DatasetError(line, f"messages[{i}] is not {{\"role\": one of {', '.join(ROLES)}, "
                                     "\"content\": a string}")
    return DatasetRow(line, None, tuple(messages), max_tokens)


def read_rows(lines: Iterable[bytes | str], max_rows: int | None = None) -> Iterator[DatasetRow]:
    """The rows of `lines`, in order, up to `max_rows`; a bad row raises DatasetError."""
    kept = 0
    for n, text in enumerate(lines, start=1):
        if max_rows is not None and kept >= max_rows:
            return
        row = parse_row(n, text)
        if row is not None:
            kept += 1
            yield row


@contextmanager
def dataset_rows(config: RunConfig, s3: Callable[[], Any] | None) -> Iterator[Iterator[DatasetRow]]:
    """The configured dataset's rows, streamed; a bad row raises ConfigError naming its line."""
    d = config.scenarios.dataset
    with file_lines(FIELD, "dataset", d.path, d.s3_key, d.s3_bucket, config.archive.bucket, s3) as lines:
        yield _as_config_errors(read_rows(lines, d.max_requests), d.source_name())


def _as_config_errors(rows: Iterator[DatasetRow], source: str) -> Iterator[DatasetRow]:
    try:
        yield from rows
    except DatasetError as exc:
        raise ConfigError([(FIELD, f"dataset ({source}) line {exc.line}: {exc.problem}", ROW_FIX)]) from None


def check_dataset(config: RunConfig, s3: Callable[[], Any] | None) -> dict[str, Any]:
    """Read the rows once, as the plan does, before anything deploys; what the manifest records of them: the
    rows, the chats among them, and the sha256 of the rows as sent (`content_sha256`: two runs sent the same
    prompts when it matches, wherever the file was read from)."""
    d = config.scenarios.dataset
    rows = chats = 0
    content = hashlib.sha256()
    with dataset_rows(config, s3) as stream:
        for row in stream:
            rows += 1
            chats += row.messages is not None
            content.update(json.dumps([row.prompt, row.messages, row.max_tokens], sort_keys=True).encode() + b"\n")
    if not rows:
        raise ConfigError([(FIELD, f"the dataset ({d.source_name()}) holds no row", ROW_FIX)])
    return {"source": d.source_name(), "rows": rows, "chat_rows": chats, "content_sha256": content.hexdigest()}
