"""The engine's own log, kept for the whole run and read for what caused its slow rounds.

The teardown step keeps the log as the platform holds it (the pod's container log, the previous container's
first after a restart; a local process's log file, every launch of the run appended, its last 2 MB), scrubbed
like every record, as logs/<engine>.log; the archive stores it as engine.log beside the tables.

A first-encounter round whose P99 is FIRST_TAIL times the steady median of its shape (warmup rounds
included: the compile they paid), or a measured round OUTLIER times it, is held against the log: its slowest
request's span (send to last event) is searched for the engine's compile, graph-capture
or JIT lines (the adapter's startup patterns `cuda_graph_capture` and `autotune_jit`) and for its preemption
or retraction lines (the adapter's word for them). A line coincides when the second its stamp names (engines
stamp whole seconds) overlaps the span, begun SEND_SLACK_S early (the client stamps a send once it is
written). The tail is labelled `compile`, `scheduler`, both, or `unknown` when neither coincides. Stamps are
read as UTC (`YYYY-MM-DD HH:MM:SS`, or vLLM's `MM-DD HH:MM:SS` in the round's year); a log none of whose
stamps falls within the run's span is another clock, and nothing is attributed from it.
"""

from __future__ import annotations

import calendar
import datetime as dt
import logging
import re
import statistics
import time
from collections.abc import Iterable
from typing import Any

from tasks.core.desensitize import scrub_text
from tasks.state.documents import kept_log_doc

log = logging.getLogger("dayone.steps")

COMPILE_FINDINGS = ("cuda_graph_capture", "autotune_jit")
OUTLIER = 2.0  # a round's P99 this many times its shape's steady median is an outlier
FIRST_TAIL = 1.5  # a first encounter's P99 this many times it is a tail (the decision's first-encounter rule)
SEND_SLACK_S = 0.05  # the client stamps a send once written: the engine may log it a moment before
SPAN_MARGIN_S = 600.0  # a log with no stamp within the run's span (this margin either side) is another clock
_FULL = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?")
_MONTH_DAY = re.compile(r"\b(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?")


def keep_engine_log(ctx: Any, engine: str) -> dict[str, Any]:
    """Keep the engine's log in the run state, scrubbed (the teardown step, before the engine goes)."""
    try:
        dep = ctx.deployment(engine)
        if dep.handle.get("dry_run"):
            return {"kept": False, "why": "dry run"}
        text = _with_a_last_memory_reading(ctx, dep, ctx.target.startup_log(dep))
    except Exception as exc:  # noqa: BLE001  (a log that cannot be read must not keep the engine up)
        log.warning("engine %s: its log could not be kept: %s", engine, exc)
        return {"kept": False, "why": scrub_text(str(exc))[:300]}
    body = scrub_text(text).encode("utf-8")
    ctx.run_dir.write_bytes(kept_log_doc(engine), body)
    return {"kept": True, "bytes": len(body)}


def _with_a_last_memory_reading(ctx: Any, dep: Any, text: str) -> str:
    """The log once its pod's memory loop (tasks/telemetry/hardware.py) printed a reading after teardown began,
    so the last load step has its "after" reading (memory per card); waits at most two of the loop's periods,
    and not at all where the log carries no reading (no loop, no nvidia-smi, a local engine)."""
    from tasks.telemetry.hardware import memory_readings

    readings = memory_readings(text)[0]  # first: a log without them (a local engine's) needs nothing else
    interval = ctx.config.kubernetes.gpu_memory_interval_s if readings and ctx.config.target == "kubernetes" else None
    if not interval:
        return text
    # the loop's period as it ran: the setting plus each nvidia-smi call's own time
    period = max([float(interval)] + [b[0] - a[0] for a, b in zip(readings[-4:], readings[-3:])])
    began = time.time()
    deadline = time.monotonic() + 2.0 * period + 1.0
    while memory_readings(text)[0][-1][0] < began and time.monotonic() < deadline:
        time.sleep(min(1.0, float(interval) / 2.0))
        text = ctx.target.startup_log(dep) or text
    return text


def log_time(line: str, year: int) -> tuple[float, float] | None:
    """(the Unix time a log line is stamped with, read as UTC; how long that stamp spans: a second, or a
    millisecond where it has a fraction); None without a stamp."""
    m = _FULL.search(line)
    if m:
        y, mo, d, h, mi, s, frac = m.groups()
    else:
        m = _MONTH_DAY.search(line)
        if not m:
            return None
        (mo, d, h, mi, s, frac), y = m.groups(), str(year)
    try:
        when = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s))
    except ValueError:
        return None
    return calendar.timegm(when.timetuple()) + (float(f"0.{frac}") if frac else 0.0), 0.001 if frac else 1.0


def cause_of(line: str, adapter: Any) -> str | None:
    """`compile` for a compile, graph-capture or JIT line, `scheduler` for a preemption or retraction line (the
    adapter's patterns and word), else None."""
    found = {f["finding"] for f in adapter.scan_startup_log(line)}
    if found & set(COMPILE_FINDINGS):
        return "compile"
    word = adapter.round_metrics.preemption_word.removesuffix("ions")  # preempt, retract
    if word and re.search(word, line, re.IGNORECASE):
        return "scheduler"
    return None


def tail_causes(text: str, adapter: Any, rounds: list[dict[str, Any]],
                requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each first-encounter or outlier round, its slowest request, and what the engine's log says caused it:
    {scenario, level, round, launch, warmup, first_encounter, tail_s, cause, line, why}."""
    flagged = _flagged(rounds)
    if not flagged:
        return []
    spans = {}
    for r in requests:
        if r.get("status") == "ok" and r.get("send_ts") is not None and r.get("e2e_s") is not None:
            key = _key(r)
            if key in flagged and (key not in spans or r["e2e_s"] > spans[key][1] - spans[key][0]):
                spans[key] = (float(r["send_ts"]), float(r["send_ts"]) + float(r["e2e_s"]))
    if not spans:
        return []
    year = dt.datetime.fromtimestamp(min(s for s, _ in spans.values()), dt.timezone.utc).year
    stamped = [(*t, line.strip()) for line in text.splitlines() if (t := log_time(line, year)) is not None]
    first, last = min(s for s, _ in spans.values()), max(e for _, e in spans.values())
    aligned = any(first - SPAN_MARGIN_S <= t <= last + SPAN_MARGIN_S for t, _, _ in stamped)
    timed = [(t, width, line, c) for t, width, line in stamped if (c := cause_of(line, adapter))]
    out = []
    for key, row in flagged.items():
        if key not in spans:
            continue
        start, end = spans[key]
        hits = [(c, line) for t, width, line, c in timed if t <= end and t + width >= start - SEND_SLACK_S]
        causes = sorted({c for c, _ in hits})
        if not stamped:
            cause, why = "unknown", "the engine's log has no time stamps"
        elif not aligned:
            cause, why = "unknown", "the log's stamps do not fall within the run's span (another clock or time zone)"
        elif causes:
            cause = " and ".join(causes)
            why = f"{len(hits)} {cause} line(s) of the engine's log fall within its slowest request"
        else:
            cause, why = "unknown", "no compile, graph-capture, JIT, preemption or retraction line within it"
        out.append({"scenario": row["scenario"], "level": _label(row), "round": row["round"],
                    "launch": row.get("launch") or 0, "warmup": bool(row.get("warmup")),
                    "first_encounter": bool(row.get("first_encounter")), "tail_s": round(end - start, 4),
                    "cause": cause, "line": hits[0][1][:300] if hits else None, "why": why})
    return out


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r.get("scenario"), r.get("concurrency"), r.get("rate_rps"), r.get("round"), r.get("launch") or 0)


def _label(r: dict[str, Any]) -> str:
    return f"{r['rate_rps']:g} req/s" if r.get("rate_rps") is not None else f"c={r.get('concurrency')}"


def _flagged(rounds: Iterable[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The rounds to explain, against the steady rounds of their shape (measured, not first encounters): a first
    encounter (warmup ones included) whose P99 (TTFT, else E2E) is FIRST_TAIL times their median, and a measured
    round OUTLIER times it."""
    rounds = list(rounds)
    steady: dict[tuple[Any, ...], list[float]] = {}
    for r in rounds:
        value = _p99(r)
        if value is not None and not r.get("warmup") and not r.get("first_encounter"):
            steady.setdefault(_shape(r), []).append(value)
    out = {}
    for r in rounds:
        value, peers = _p99(r), steady.get(_shape(r), [])
        if value is None or not peers:
            continue
        median = statistics.median(peers)
        if (r.get("first_encounter") and value >= FIRST_TAIL * median) or (
                not r.get("warmup") and len(peers) >= 3 and value >= OUTLIER * median):
            out[_key(r)] = r
    return out


def _shape(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r.get("input_tokens"), r.get("output_tokens"), r.get("concurrency"), r.get("rate_rps"))


def _p99(r: dict[str, Any]) -> float | None:
    value = r.get("ttft_p99_s") if r.get("ttft_p99_s") is not None else r.get("e2e_p99_s")
    return None if value is None else float(value)
