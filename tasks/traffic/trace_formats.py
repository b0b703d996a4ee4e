"""Request-trace readers: Mooncake JSONL, the Azure LLM inference CSV and DayOne's own JSONL, one row at a
time (a trace is streamed, never loaded whole). A bad row raises TraceError naming its line and the fix."""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# Each format's columns, as PROTOCOL.md section 4 names them: (arrival, prompt tokens, output tokens, blocks).
COLUMNS = {
    "mooncake": ("timestamp", "input_length", "output_length", "hash_ids"),  # timestamp in ms
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens", None),  # TIMESTAMP a date and time
    "dayone": ("arrival_s", "input_tokens", "output_tokens", "block_ids"),  # arrival in seconds
}


class TraceError(ValueError):
    """A trace that cannot be replayed: the line, what is wrong with it, and the fix."""

    def __init__(self, line: int | None, problem: str, fix: str):
        self.line, self.problem, self.fix = line, problem, fix
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"{where}{problem}. Fix: {fix}")


@dataclass(frozen=True, slots=True)
class TraceRow:
    line: int  # 1-based line of the file (the CSV header is line 1)
    arrival_s: float  # seconds from the trace's first arrival
    input_tokens: int
    output_tokens: int
    block_ids: tuple[int, ...]  # leading blocks of block_tokens each; () for a trace without them


def read_trace(lines: Iterable[bytes | str], fmt: str, block_tokens: int) -> Iterator[TraceRow]:
    """The trace's rows in order; arrivals relative to the first row's and never going back."""
    if fmt not in COLUMNS:
        raise TraceError(None, f"unknown trace format {fmt!r}", f"use one of {', '.join(COLUMNS)}")
    rows = _azure(lines) if fmt == "azure" else _jsonl(lines, fmt)
    first = last = None
    for line, ts_s, inp, out, blocks in rows:
        if first is None:
            first = ts_s
        if last is not None and ts_s < last:
            raise TraceError(line, f"arrival {ts_s - first:g} s is before the previous row's {last - first:g} s",
                             "sort the trace by its arrival column")
        last = ts_s
        if blocks and (len(blocks) - 1) * block_tokens >= inp:
            raise TraceError(line, f"{len(blocks)} blocks of {block_tokens} tokens are more than {inp} prompt tokens "
                                   "fill", "set scenarios.trace.block_tokens to the trace's block size (Mooncake: 512)")
        yield TraceRow(line, ts_s - first, inp, out, blocks)


def _count(value: object, line: int, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < least:
        raise TraceError(line, f"{name} is {value!r}, not an integer >= {least}",
                         f"give {name} as a whole number of tokens >= {least}")
    return int(value)


def _jsonl(lines: Iterable[bytes | str], fmt: str) -> Iterator[tuple[int, float, int, int, tuple[int, ...]]]:
    ts_name, in_name, out_name, blocks_name = COLUMNS[fmt]
    per_second = 1000.0 if fmt == "mooncake" else 1.0
    for n, raw in enumerate(lines, start=1):
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise TraceError(n, f"not a JSON object ({exc.msg})", "write one JSON object per line") from None
        if not isinstance(obj, dict):
            raise TraceError(n, "not a JSON object", "write one JSON object per line")
        missing = [k for k in (ts_name, in_name, out_name) if k not in obj]
        if missing:
            raise TraceError(n, f"{', '.join(missing)} missing", f"give {ts_name}, {in_name} and {out_name} on every "
                                                                 f"row ({fmt} format)")
        ts = obj[ts_name]
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
            raise TraceError(n, f"{ts_name} is {ts!r}", f"give {ts_name} as a number >= 0"
                                                        f" ({'milliseconds' if per_second != 1 else 'seconds'})")
        blocks = obj.get(blocks_name)
        if blocks is None:
            ids: tuple[int, ...] = ()
        elif isinstance(blocks, list) and all(isinstance(b, int) and not isinstance(b, bool) and b >= 0
                                              for b in blocks):
            ids = tuple(blocks)
        else:
            raise TraceError(n, f"{blocks_name} is not a list of integers >= 0", f"give {blocks_name} as block ids, "
                                                                                 "e.g. [0, 1, 2], or leave it out")
        yield (n, float(ts) / per_second, _count(obj[in_name], n, in_name, 1), _count(obj[out_name], n, out_name, 1),
               ids)


def _azure(lines: Iterable[bytes | str]) -> Iterator[tuple[int, float, int, int, tuple[int, ...]]]:
    ts_name, in_name, out_name, _ = COLUMNS["azure"]
    texts = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw for raw in lines)
    reader = csv.reader(texts)
    header = next(reader, None)
    if header is None:
        return
    header = [h.strip().lstrip("\ufeff") for h in header]
    missing = [k for k in (ts_name, in_name, out_name) if k not in header]
    if missing:
        raise TraceError(1, f"header {','.join(header)[:120]} lacks {', '.join(missing)}",
                         f"start the CSV with the header {ts_name},{in_name},{out_name} (Azure LLM inference trace)")
    at = [header.index(k) for k in (ts_name, in_name, out_name)]
    for cells in reader:
        n = reader.line_num
        if not cells or not any(c.strip() for c in cells):
            continue
        if len(cells) < len(header):
            raise TraceError(n, f"{len(cells)} cells, the header has {len(header)}", "give every column on every row")
        ts, inp, out = (cells[i].strip() for i in at)
        yield (n, _azure_time(ts, n), _count(_int(inp), n, in_name, 1), _count(_int(out), n, out_name, 1), ())


def _int(text: str) -> object:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _azure_time(text: str, line: int) -> float:
    """Seconds since the epoch of an Azure TIMESTAMP ('2023-11-16 18:15:46.6805900': 100 ns ticks, UTC)."""
    head, _, frac = text.partition(".")
    try:
        whole = dt.datetime.fromisoformat(head).replace(tzinfo=dt.timezone.utc).timestamp()
        return whole + (float(f"0.{frac}") if frac else 0.0)
    except ValueError:
        raise TraceError(line, f"TIMESTAMP {text!r} is not a date and time",
                         "give TIMESTAMP as YYYY-MM-DD HH:MM:SS[.fraction]") from None


def window(rows: Iterable[TraceRow], start_s: float = 0.0, length_s: float | None = None,
           max_requests: int | None = None) -> Iterator[TraceRow]:
    """The rows whose arrival falls in [start_s, start_s + length_s), at most max_requests of them, with
    arrivals re-based on the window's first row (no idle lead-in); stops reading at the window's end."""
    sent, first = 0, None
    for row in rows:
        if row.arrival_s < start_s:
            continue
        if (length_s is not None and row.arrival_s >= start_s + length_s) or (
                max_requests is not None and sent >= max_requests):
            return
        if first is None:
            first = row.arrival_s
        sent += 1
        yield TraceRow(row.line, row.arrival_s - first, row.input_tokens, row.output_tokens, row.block_ids)
