"""Where a trace is read from (a file on the runner or an S3 object of the run's store, traffic_file.py; or
the synthetic generator), streamed line by line; and the plan's check of the window to replay, before
anything deploys."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tasks.config import ConfigError, RunConfig
from tasks.config.traffic import TraceScenario
from tasks.traffic.trace_formats import TraceError, TraceRow, read_trace, window
from tasks.traffic.trace_prompts import ReuseMeter
from tasks.traffic.traffic_file import file_lines

FIELD = "scenarios.trace"


@contextmanager
def trace_lines(settings: TraceScenario, archive_bucket: str,
                s3: Callable[[], Any] | None) -> Iterator[Iterator[bytes]]:
    """The trace's lines as they are read. `s3` builds the S3 client (the dayone_s3 connection's)."""
    if settings.synthetic is not None:
        from tasks.traffic.trace_synth import synthetic_lines

        yield (line.encode() for line in synthetic_lines(**settings.synthetic.model_dump()))
    else:
        with file_lines(FIELD, "trace", settings.path, settings.s3_key, settings.s3_bucket, archive_bucket,
                        s3) as lines:
            yield lines


@contextmanager
def window_rows(config: RunConfig, s3: Callable[[], Any] | None) -> Iterator[Iterator[TraceRow]]:
    """The rows of the configured window, streamed; a bad row raises ConfigError naming its line."""
    t = config.scenarios.trace
    with trace_lines(t, config.archive.bucket, s3) as lines:
        yield _as_config_errors(window(read_trace(lines, t.format, t.block_tokens), t.window_start_s,
                                       t.window_length_s, t.max_requests))


def _as_config_errors(rows: Iterator[TraceRow]) -> Iterator[TraceRow]:
    try:
        yield from rows
    except TraceError as exc:
        where = f"line {exc.line}: " if exc.line is not None else ""
        raise ConfigError([(FIELD, f"trace {where}{exc.problem}", exc.fix)]) from None


def check_trace(config: RunConfig, s3: Callable[[], Any] | None) -> dict[str, Any]:
    """Read the whole window once, as the plan does: every row parsed and within the model's context. Returns
    what the manifest records of it: rows, span, lengths, the trace's own expected prefix reuse, and the sha256
    of the window's rows as replayed (`content_sha256`: two runs sent the same traffic when it matches, wherever
    the trace was read from)."""
    t = config.scenarios.trace
    limit = config.model.context_limit_tokens
    reuse = ReuseMeter(t.block_tokens)
    rows = last = 0
    longest_in = longest_out = 0
    content = hashlib.sha256()
    with window_rows(config, s3) as stream:
        for row in stream:
            content.update(f"{row.arrival_s!r},{row.input_tokens},{row.output_tokens},{row.block_ids}\n".encode())
            if limit and row.input_tokens + row.output_tokens > limit:
                raise ConfigError([(FIELD, f"trace line {row.line}: {row.input_tokens} prompt + {row.output_tokens} "
                                           f"output tokens exceed model.context_limit_tokens {limit}",
                                    "replay a window without it (window_start_s, window_length_s, max_requests), "
                                    "or raise the limit if the model has more")])
            rows += 1
            last = row.arrival_s
            longest_in, longest_out = max(longest_in, row.input_tokens), max(longest_out, row.output_tokens)
            reuse.observe(row)
    if not rows:
        raise ConfigError([(FIELD, f"the window ({t.window_start_s:g} s on, {t.source_name()}) holds no request",
                            "move window_start_s inside the trace, or lengthen window_length_s")])
    return {"source": t.source_name(), "format": t.format, "rows": rows, "span_s": last, "replay_s": last / t.speed,
            "offered_rps": rows / (last / t.speed) if last > 0 else None, "longest_input_tokens": longest_in,
            "longest_output_tokens": longest_out, "expected_reuse": reuse.share, "content_sha256": content.hexdigest()}
