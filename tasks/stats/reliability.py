"""May an engine's stream-timed figures be published? (PROTOCOL.md section 8, "Stream-timed figures: one rule")

The one rule for TTFT, TPOT and ITL, read by every path that publishes them (`dayone bench`, `dayone
check`, the pipeline's summary.json and its report): they mean something only for output delivered as
it is generated, so a defective stream (no output event, all of a multi-token output in one event, or
more than half of it in the last), a failed `output_streams` check, an ignored echo=false, or streaming
never shown withholds them, and E2E alone is published, with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tasks.engines.stream import StreamResult

STREAMING_CHECK = "output_streams"
ECHO_CHECK = "completions_echo_false"
# Figures timed from a stream's events: published or withheld together.
STREAM_TIMED_PREFIXES = ("ttft_", "tpot_", "itl_")
# Below this many output tokens one long token can outweigh the rest: only the one-event rule applies.
MIN_TOKENS_FOR_SHARE_RULE = 8


# How a withheld figure's reason begins; a page that already says "not published" shows the rest.
WITHHELD = "TTFT not published (nor TPOT and ITL), E2E only: "

def stream_defect(output_events: int, output_tokens: int | None, last_event_share: float | None) -> str | None:
    """Why one stream did not deliver its output as generated, or None when it did.

    `output_tokens` may be an estimate (words) where usage is missing; None when unknown.
    """
    if output_events <= 0:
        return "no delta carried any text"
    if output_events == 1 and (output_tokens is None or output_tokens > 1):
        size = "an unknown number of" if output_tokens is None else str(output_tokens)
        return f"all output ({size} tokens) came in one event"
    if (output_tokens is not None and output_tokens >= MIN_TOKENS_FOR_SHARE_RULE
            and last_event_share is not None and last_event_share > 0.5):
        return f"the last event carried {last_event_share:.0%} of the output ({output_events} events)"
    return None


def judge_stream(s: StreamResult) -> str | None:
    """`stream_defect` of one stream read by `stream_post` (a check's, a cache trial's), or None."""
    text = s.content + s.reasoning
    tokens = s.completion_tokens
    size = tokens if tokens is not None else len(text.split())  # words stand in when usage is missing
    last_share = None
    if s.output_events and text:
        last = s.output_events[-1]
        last_share = (len(last.content) + len(last.reasoning)) / len(text)
    return stream_defect(len(s.output_events), size, last_share)


def _as_list(value: Any) -> list[Any] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return list(value) if isinstance(value, (list, tuple)) else None


def row_output_events(row: Mapping[str, Any]) -> int | None:
    """Output events of a requests-table row (older rows: from the gaps between them)."""
    n = row.get("output_events")
    if n is not None:
        return int(n)
    gaps = _as_list(row.get("itl_s"))
    if gaps is not None:
        return len(gaps) + 1
    per_event = _as_list(row.get("tokens_per_event"))
    return len(per_event) if per_event is not None else None


def row_defect(row: Mapping[str, Any]) -> str | None:
    """`stream_defect` of one completed requests-table row (or a needles row, which records its own);
    None for failed rows."""
    if row.get("status") != "ok":
        return None
    if "stream_defect" in row:
        return row["stream_defect"] or None
    events = row_output_events(row)
    if events is None:
        return None
    tokens = row.get("completion_tokens")
    return stream_defect(events, None if tokens is None else int(tokens), row.get("last_event_share"))


def unstreamed_requests(requests_rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(request id, why) of every measured stream that did not deliver its output as generated."""
    out = []
    for r in requests_rows:
        why = row_defect(r)
        if why:
            out.append((str(r.get("request_id")), why))
    return out


def _streamed(requests_rows: Iterable[Mapping[str, Any]]) -> bool:
    """At least one completed measured stream delivered a multi-token output over several events."""
    return any(
        r.get("status") == "ok" and (row_output_events(r) or 0) > 1 and (r.get("completion_tokens") or 0) > 1
        for r in requests_rows
    )


def _evidence_text(row: Mapping[str, Any]) -> str:
    evidence = row.get("evidence")
    if isinstance(evidence, str):
        try:
            evidence = json.loads(evidence)
        except ValueError:
            return evidence[:200]
    if isinstance(evidence, dict):
        return str(evidence.get("reason") or evidence.get("excerpt") or "")[:200]
    return ""


def ttft_verdict(checks_rows: Iterable[Mapping[str, Any]] | None = None,
                 requests_rows: Iterable[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """{reliable, reason} for one engine, from its `checks` rows and its measured `requests` rows
    (either may be missing: `dayone bench` has no checks, `dayone check` no measured streams)."""
    by_check = {r.get("check"): r for r in (checks_rows or ())}
    measured = list(requests_rows or ())
    reasons: list[str] = []
    streams = by_check.get(STREAMING_CHECK)
    if streams is not None and streams.get("outcome") != "pass":
        detail = _evidence_text(streams)
        reasons.append(f"output does not really stream ({STREAMING_CHECK}: {streams.get('outcome')}"
                       + (f": {detail}" if detail else "") + ")")
    echo = by_check.get(ECHO_CHECK)
    if echo is not None and echo.get("outcome") == "fail":
        detail = _evidence_text(echo)
        reasons.append("the completions API ignored echo=false" + (f" ({detail})" if detail else ""))
    unstreamed = unstreamed_requests(measured)
    if unstreamed:
        examples = "; ".join(f"{rid}: {why}" for rid, why in unstreamed[:2])
        reasons.append(f"{len(unstreamed)} of {sum(1 for r in measured if r.get('status') == 'ok')} measured "
                       f"streams did not deliver output as generated (e.g. {examples})")
    shown_by_check = streams is not None and streams.get("outcome") == "pass"
    if not reasons and not shown_by_check and not _streamed(measured):
        reasons.append(f"streaming was never shown: the {STREAMING_CHECK} check did not run and no measured "
                       "stream delivered a multi-token output over several events")
    if reasons:
        return {"reliable": False, "reason": WITHHELD + "; ".join(reasons)}
    basis = f"the {STREAMING_CHECK} check passed" if shown_by_check else "the measured streams"
    if measured and shown_by_check:
        basis += " and every measured stream"
    echo_note = "echo=false honoured" if echo is not None and echo.get("outcome") == "pass" else (
        "echo=false not checked" if echo is None else f"echo=false {echo.get('outcome')}")
    return {"reliable": True, "reason": f"output streams as generated ({basis}); {echo_note}"}


def withhold_stream_timed(figures: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`figures` without the stream-timed ones (TTFT, TPOT, ITL), for an unreliable stream."""
    if figures is None:
        return None
    return {k: v for k, v in figures.items() if not k.startswith(STREAM_TIMED_PREFIXES)}


def engine_ttft_verdict(run_dir: Any, engine: str) -> dict[str, Any]:
    """`ttft_verdict` of one engine of a run, from everything it measured: its checks, the streams of
    the benchmarks and the capacity search, and the needles' streams. The summary and the nightly
    comparison both read it."""
    from tasks.core.names import CAPACITY_SCENARIO, PERF_SCENARIOS

    measured = [r for r in run_dir.read_rows("requests", engine)
                if r.get("scenario") in (*PERF_SCENARIOS, CAPACITY_SCENARIO)]
    return ttft_verdict(run_dir.read_rows("checks", engine), measured + run_dir.read_rows("needles", engine))
