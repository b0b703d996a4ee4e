"""The load client: streams one request and times it (PROTOCOL.md section 3; section 8, "The timing loop
stamps and queues" and "The send stamp is bracketed").

Connections are DayOne's own asyncio protocols on uvloop (tasks/load/http.py; why not aiohttp:
bench/RESULTS.md): the read callback stamps each event and hands its bytes to the stream's parser,
with no task to wake. All stamps come from one monotonic clock (perf_counter), anchored to Unix time
once per request. Control-plane calls (tokenize, cache clear, metrics) use httpx elsewhere.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tasks.engines.access import EndpointAccess
from tasks.engines.base import EngineAdapter
from tasks.load.http import Connection, StreamSession
from tasks.stats.figures import tpot


# msgspec decodes an event in a fifth of json.loads's time, on the loop that stamps the reads.
_decode_json = msgspec.json.Decoder().decode

# A write call this long held a preemption (it takes tens of microseconds): the send takes the stamp before it.
SEND_BRACKET_WIDE_S = 0.001

# Bounds on what a hostile or broken server can make the client hold or record.
MAX_EVENT_BYTES = 1 << 20  # one SSE event; real ones are well under a KiB
MAX_TOKEN_COUNT = 2**31 - 1  # a usage count beyond this (or negative) is not a count


class StreamError(Exception):
    """The stream broke the SSE/OpenAI protocol: malformed data, an error object, or cut short."""


@dataclass(frozen=True)
class RequestSpec:
    """One request, planned and serialised before the clock starts."""

    request_id: str
    path: str  # e.g. /v1/completions
    payload: bytes  # JSON body, serialised ahead of time so encoding is not timed
    expected_prompt_tokens: int | None = None
    expected_completion_tokens: int | None = None
    keep_output: bool = False  # keep the answer's text: a multi-turn client sends it back in the next turn


@dataclass
class StreamParser:
    """Turns the bytes of an OpenAI-style SSE stream into timed events. Pure: no I/O.

    `feed(data, t)` takes each read and the perf_counter time it was read at.
    """

    adapter: EngineAdapter
    first_event_t: float | None = None
    output_t: list[float] = field(default_factory=list)
    # completion_tokens seen on each output event (continuous usage), None where absent
    output_usage_tokens: list[int | None] = field(default_factory=list)
    # visible characters of all output events and of the latest one: the last event's share
    # shows output held back to the end of a stream whose tokens per event are unknown
    output_chars: int = 0
    last_output_chars: int = 0
    usage: dict[str, Any] | None = None
    done: bool = False
    events: int = 0
    keep_output: bool = False
    output_pieces: list[str] = field(default_factory=list)  # the answer's content, kept with keep_output
    _buf: bytes = b""

    def feed(self, data: bytes, t: float) -> None:
        buf = self._buf + data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        while True:
            end = buf.find(b"\n\n")
            if end < 0:
                break
            block, buf = buf[:end], buf[end + 2 :]
            self._event(block, t)
        if len(buf) > MAX_EVENT_BYTES:
            raise StreamError(f"SSE event over {MAX_EVENT_BYTES // (1 << 20)} MiB without an end: {buf[:200]!r}")
        self._buf = buf

    def finish(self) -> None:
        """Called at end of stream: a stream that never sent [DONE] was cut short."""
        if self._buf.strip():
            self._event(self._buf.strip(b"\n"), None)
            self._buf = b""
        if not self.done:
            raise StreamError(f"stream ended before [DONE] after {self.events} events")

    def _event(self, block: bytes, t: float | None) -> None:
        if block.startswith(b"data: ") and b"\n" not in block:
            data = block[6:]  # the usual event: one data line
        else:
            data_lines = []
            for line in block.split(b"\n"):
                if line.startswith(b"data:"):
                    data_lines.append(line[5:].lstrip(b" "))
                elif line and not line.startswith(b":") and b":" not in line:
                    raise StreamError(f"malformed SSE line: {line[:200]!r}")
            if not data_lines:
                return  # a comment or keep-alive
            data = b"\n".join(data_lines)
        if t is None:
            raise StreamError(f"stream ended inside an event: {data[:200]!r}")
        self.events += 1
        if self.first_event_t is None:
            self.first_event_t = t
        if self.done:
            raise StreamError(f"data after [DONE]: {data[:200]!r}")
        if data == b"[DONE]":
            self.done = True
            return
        try:
            chunk = _decode_json(data)
        except msgspec.MsgspecError:
            try:  # what msgspec refuses and Python reads: integers past 64 bits, NaN
                chunk = json.loads(data)
            except ValueError:
                raise StreamError(f"malformed JSON in stream event: {data[:200]!r}") from None
        if not isinstance(chunk, dict):
            raise StreamError(f"stream event is not a JSON object: {data[:200]!r}")
        if chunk.get("error") is not None and not chunk.get("choices"):
            raise StreamError(f"error event in stream: {json.dumps(chunk['error'])[:500]}")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        chars = self._output_chars(chunk.get("choices") or ())
        if chars:
            self.output_t.append(t)
            self.output_chars += chars
            self.last_output_chars = chars
            tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
            self.output_usage_tokens.append(tokens)

    def _output_chars(self, choices: Sequence[Any]) -> int:
        """Visible output characters in an event's choices (a tool-call fragment counts as one);
        0 for a role-only or empty event."""
        chars = 0
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            text = choice.get("text")
            if isinstance(text, str):
                chars += len(text)
            delta = choice.get("delta")
            if isinstance(delta, dict):
                content = delta.get("content")
                chars += len(content) if isinstance(content, str) else 0
                if self.keep_output and isinstance(content, str):
                    self.output_pieces.append(content)
                chars += len(self.adapter.reasoning_text(delta))
                chars += 1 if delta.get("tool_calls") else 0
        return chars

    @property
    def last_event_share(self) -> float | None:
        """The share of the visible output that the last output event carried."""
        return self.last_output_chars / self.output_chars if self.output_chars else None

    def tokens_per_event(self, completion_tokens: int | None) -> list[int] | None:
        """Tokens carried by each output event, or None when the stream does not tell.

        Known when every output event carried a running usage count (vLLM's continuous usage),
        when the completion-token count equals the number of output events (one token each), or
        when a single event carried the whole output: one event is a fact, not a missing value.
        """
        n = len(self.output_t)
        if n == 1 and completion_tokens is not None:
            return [completion_tokens]
        if n and all(_count_or_none(x) is not None for x in self.output_usage_tokens):
            counts, prev = [], 0
            for x in self.output_usage_tokens:
                counts.append(int(x) - prev)  # type: ignore[arg-type]
                prev = int(x)  # type: ignore[arg-type]
            return counts
        if completion_tokens is not None and completion_tokens == n:
            return [1] * n
        return None


@dataclass
class RequestResult:
    request_id: str
    send_ts: float  # Unix time the request was written
    send_bracket_s: float | None = None  # stamps before and after the write call: the send's uncertainty
    send_wide: bool = False  # the bracket was over SEND_BRACKET_WIDE_S: the send is its before-stamp
    status: str = "ok"  # ok | error | timeout
    error: str | None = None
    http_status: int | None = None
    first_event_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = None
    itl_s: list[float] | None = None
    tokens_per_event: list[int] | None = None
    output_events: int = 0
    last_event_share: float | None = None
    output_event_s: list[float] = field(default_factory=list)  # each output event, from send
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    usage_present: bool = False
    expected_prompt_tokens: int | None = None
    expected_completion_tokens: int | None = None
    length_deviation: bool | None = None
    cached_prompt_tokens: int | None = None  # the engine's cached prompt tokens (its adapter reads usage)
    output_text: str | None = None  # the answer's content, where the spec asked to keep it

    def row_fields(self) -> dict[str, Any]:
        """The requests-table columns this result fills (the caller adds the row keys)."""
        return {
            "request_id": self.request_id,
            "send_ts": self.send_ts,
            "send_bracket_s": self.send_bracket_s,
            "send_wide": self.send_wide,
            "first_event_s": self.first_event_s,
            "ttft_s": self.ttft_s,
            "e2e_s": self.e2e_s,
            "tpot_s": self.tpot_s,
            "itl_s": self.itl_s,
            "tokens_per_event": self.tokens_per_event,
            "output_events": self.output_events,
            "last_event_share": self.last_event_share,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "expected_prompt_tokens": self.expected_prompt_tokens,
            "expected_completion_tokens": self.expected_completion_tokens,
            "length_deviation": self.length_deviation,
            "status": self.status,
            "http_status": self.http_status,
            "error": self.error,
        }


def build_result(spec: RequestSpec, send_ts: float, t_send: float, parser: StreamParser) -> RequestResult:
    """Timing and lengths of a finished stream (perf_counter times relative to `t_send`)."""
    r = RequestResult(
        request_id=spec.request_id,
        send_ts=send_ts,
        expected_prompt_tokens=spec.expected_prompt_tokens,
        expected_completion_tokens=spec.expected_completion_tokens,
    )
    if parser.first_event_t is not None:
        r.first_event_s = parser.first_event_t - t_send
    r.output_event_s = [t - t_send for t in parser.output_t]
    r.output_events = len(r.output_event_s)
    r.last_event_share = parser.last_event_share
    if r.output_event_s:
        r.ttft_s = r.output_event_s[0]
        r.e2e_s = r.output_event_s[-1]
        r.itl_s = [b - a for a, b in zip(r.output_event_s, r.output_event_s[1:])]
    usage = parser.usage or {}
    r.usage_present = "completion_tokens" in usage
    r.prompt_tokens = _count_or_none(usage.get("prompt_tokens"))
    r.completion_tokens = _count_or_none(usage.get("completion_tokens"))
    r.tokens_per_event = parser.tokens_per_event(r.completion_tokens)
    try:
        r.cached_prompt_tokens = _count_or_none(parser.adapter.cached_tokens(parser.usage))
    except (TypeError, ValueError, AttributeError, OverflowError):
        r.cached_prompt_tokens = None  # an answer the dialect does not read as a count
    if spec.keep_output:
        r.output_text = "".join(parser.output_pieces)
    if r.tokens_per_event is not None and any(not 0 <= n <= MAX_TOKEN_COUNT for n in r.tokens_per_event):
        r.tokens_per_event = None
    absurd = {k: usage[k] for k in ("prompt_tokens", "completion_tokens")
              if usage.get(k) is not None and _count_or_none(usage[k]) is None}
    if absurd:  # kept out of the counts, but on the row: the engine said it
        r.error = f"usage out of range, recorded as unknown: {json.dumps(absurd, default=str)[:200]}"
    r.tpot_s = tpot(r.e2e_s, r.ttft_s, r.completion_tokens)
    r.length_deviation = length_deviation(
        spec.expected_prompt_tokens, r.prompt_tokens, spec.expected_completion_tokens, r.completion_tokens
    )
    if not r.output_event_s:
        r.status, r.error = "error", "stream carried no visible output"
    return r


def length_deviation(
    expected_prompt: int | None, prompt: int | None, expected_completion: int | None, completion: int | None
) -> bool | None:
    """True when usage reports other lengths than requested; None when usage does not say."""
    checks = [(e, a) for e, a in ((expected_prompt, prompt), (expected_completion, completion)) if e is not None]
    if not checks:
        return False
    if any(a is None for _, a in checks):
        return None
    return any(e != a for e, a in checks)


def _int_or_none(v: Any) -> int | None:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _count_or_none(v: Any) -> int | None:
    """A token count from usage, or None when it is missing or absurd (negative, huge, not a number)."""
    n = _int_or_none(v)
    return n if n is not None and 0 <= n <= MAX_TOKEN_COUNT and not isinstance(v, bool) else None


@dataclass
class _WriteBracket:
    width_s: float | None = None
    wide: bool = False


async def send_request(
    session: StreamSession,
    base_url: str,
    spec: RequestSpec,
    adapter: EngineAdapter,
    timeout_s: float,
) -> RequestResult:
    """Send one streaming request and time it (`_exchange`); the result carries its write bracket."""
    bracket = _WriteBracket()
    result = await _exchange(session, base_url, spec, adapter, timeout_s, bracket)
    result.send_bracket_s, result.send_wide = bracket.width_s, bracket.wide
    return result


async def _exchange(
    session: StreamSession,
    base_url: str,
    spec: RequestSpec,
    adapter: EngineAdapter,
    timeout_s: float,
    bracket: _WriteBracket,
) -> RequestResult:
    """Send one streaming request and time it. Never raises for request failures: a failure is a
    result with status error/timeout and the error text.

    A request sent on a reused keep-alive connection that the server closed before any byte of a
    response came back goes once more, on a fresh connection (the one retry): a server closes an
    idle connection without reading what arrives on it, as HTTP/1.1 clients assume (RFC 9112 9.3.1),
    and a completion request that was answered would have its status line back. The result, and its
    send stamp, are the second attempt's: one row either way."""
    parser = StreamParser(adapter, keep_output=spec.keep_output)
    clock = time.perf_counter
    http_status = None
    conn: Connection | None = None
    wall0, t0 = time.time(), clock()
    send_ts, t_send = wall0, t0
    try:
        destination = session.destination(base_url)
        head = session.request_head(destination, spec.path, spec.request_id, len(spec.payload))
        async with asyncio.timeout(timeout_s):
            for fresh in (False, True):
                conn = await session.connect(destination, fresh=fresh)
                wall0, t0 = time.time(), clock()
                exchange = conn.send(head + spec.payload, parser.feed)
                t_send = clock()
                bracket.width_s = t_send - t0
                bracket.wide = bracket.width_s > SEND_BRACKET_WIDE_S
                if bracket.wide:
                    t_send = t0
                if conn.transport is not None and conn.transport.get_write_buffer_size():
                    t_send = await conn.drained()
                send_ts = wall0 + (t_send - t0)
                await exchange.done
                if not (exchange.stale and not fresh):
                    break
                session.release(destination, conn)  # closed: leaves the pool
        http_status = exchange.status
        failure = exchange.failure
        if http_status is not None and http_status != 200:
            body = exchange.error_body.decode("utf-8", "replace")
            return _failed(spec, send_ts, t_send, parser, "error", f"HTTP {http_status}: {body}", http_status)
        if isinstance(failure, StreamError):
            raise failure
        if failure is not None and not (http_status == 200 and parser.done):
            if http_status is None:
                raise failure
            msg = f"stream cut before [DONE] after {parser.events} events ({type(failure).__name__}: {failure})"
            return _failed(spec, send_ts, t_send, parser, "error", msg, http_status)
        parser.finish()
    except TimeoutError:
        msg = f"no complete response within {timeout_s:g} s ({len(parser.output_t)} output events received)"
        return _failed(spec, send_ts, t_send, parser, "timeout", msg, http_status)
    except StreamError as exc:
        return _failed(spec, send_ts, t_send, parser, "error", str(exc), http_status)
    except (OSError, ValueError) as exc:
        return _failed(spec, send_ts, t_send, parser, "error", f"{type(exc).__name__}: {exc}", http_status)
    finally:
        if conn is not None:
            session.release(destination, conn)
    result = build_result(spec, send_ts, t_send, parser)
    result.http_status = http_status
    return result


def _failed(
    spec: RequestSpec, send_ts: float, t_send: float, parser: StreamParser, status: str, error: str, http_status: int | None
) -> RequestResult:
    r = build_result(spec, send_ts, t_send, parser)  # keep what was timed before the failure
    r.status, r.error, r.http_status = status, error, http_status
    r.length_deviation = None  # lengths of a failed request are not a finding
    return r


def new_session(keep_alive: bool = True, access: EndpointAccess | None = None) -> StreamSession:
    """A session whose keep-alive pool grows to one connection per request in flight (use as an
    async context manager, with the event loop running).

    keep_alive=False opens a connection per request, for servers that close the connection after
    a streamed response while announcing keep-alive (reusing it fails the next request).
    `access`: the engine's API key and TLS trust, on every connection and request.
    """
    return StreamSession(keep_alive, access)


OnResult = Callable[[RequestResult], Any]


# While streams are timed, a thread holding the GIL (the row feed, a metrics scrape) gives it up
# to the loop within this long; CPython's default of 5 ms would stamp a read that much late.
TIMING_SWITCH_INTERVAL_S = 0.0002


@contextmanager
def timing_window() -> Iterator[None]:
    """No garbage-collector pauses, and no long waits for the GIL, while requests are timed.

    A full collection mid-round stalls the event loop, and every stream reads late by as much
    (bench/RESULTS.md). A request's garbage is freed by reference counting; the few reference
    cycles wait for the collection after the round, of the young generations alone: what the round
    allocated. The heap as it is goes to the permanent generation instead of being collected first,
    which in a worker that imported Great Expectations would itself delay the first send, and is not
    collected after it either: a full collection of that heap took about a second after every round.
    The other threads of the process (the row feed, metrics scrapes) each run Python in turn with
    the loop's; a short switch interval bounds how long the loop waits for its turn.
    """
    was_enabled = gc.isenabled()
    interval = sys.getswitchinterval()
    gc.disable()
    gc.freeze()
    sys.setswitchinterval(min(interval, TIMING_SWITCH_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        gc.unfreeze()
        if was_enabled:
            gc.enable()
        gc.collect(1)  # the round's cycles; the older heap on the collector's own schedule


async def run_closed_loop(
    session: StreamSession,
    base_url: str,
    specs: Sequence[RequestSpec],
    concurrency: int,
    adapter: EngineAdapter,
    timeout_s: float,
    on_result: OnResult | None = None,
    ramp_s: float = 0.0,
) -> list[RequestResult]:
    """Exactly `concurrency` requests in flight until every spec has been sent and answered.

    ramp_s > 0 starts the workers evenly over that many seconds instead of all at once, so
    fixed-length requests do not finish (and resend) in lockstep waves.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    results: list[RequestResult | None] = [None] * len(specs)
    next_index = 0
    workers = min(concurrency, len(specs))

    async def worker(k: int) -> None:
        nonlocal next_index
        if ramp_s > 0 and k:
            await asyncio.sleep(ramp_s * k / workers)
        while next_index < len(specs):
            i = next_index
            next_index += 1
            r = await send_request(session, base_url, specs[i], adapter, timeout_s)
            results[i] = r
            if on_result is not None:
                on_result(r)

    with timing_window():
        await asyncio.gather(*(worker(k) for k in range(workers)))
    return [r for r in results if r is not None]


async def run_open_loop(
    session: StreamSession,
    base_url: str,
    specs: Sequence[RequestSpec],
    arrivals_s: Sequence[float],
    adapter: EngineAdapter,
    timeout_s: float,
    on_result: OnResult | None = None,
) -> list[RequestResult]:
    """Send spec i at `arrivals_s[i]` seconds after the start, whatever is still in flight."""
    if len(arrivals_s) != len(specs):
        raise ValueError("one arrival time per request is needed")
    loop = asyncio.get_running_loop()

    async def one(spec: RequestSpec, due: float) -> RequestResult:
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        r = await send_request(session, base_url, spec, adapter, timeout_s)
        if on_result is not None:
            on_result(r)
        return r

    with timing_window():
        start = loop.time()  # after the collection that opens the pause
        return list(await asyncio.gather(*(one(s, start + a) for s, a in zip(specs, arrivals_s))))


def run_async(coro: Awaitable[Any]) -> Any:
    """Run a coroutine on uvloop (the asyncio default loop where uvloop is missing)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(coro)  # type: ignore[arg-type]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)  # type: ignore[arg-type]
