"""Restarts during an engine step: readings before, during and after every step.

A crash can come in any step (the near-1M long-context requests, a benchmark's burst), and an
engine under a supervisor answers again moments later, so a step's own results cannot show it.
Around every step DayOne reads the target's restart count (where the target knows one) and
scrapes /metrics, also every few seconds during the step, applying the window rule of
tasks/telemetry/window.py; a restart is a failed `engine_restarts` check whose scenario is the
step, and the step's result carries `engine_restarted`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from tasks.engines.context import EngineEndpoint, EngineContext
from tasks.telemetry import metrics
from tasks.telemetry.window import breach

CHECK = "engine_restarts"
# Between two scrapes a restarted engine's counters could climb back past their old values; a few
# seconds is far shorter than any step that sends enough requests for that.
POLL_S = 5.0
SCRAPE_TIMEOUT_S = 10.0


def _count(restart_count: Callable[[], int | None] | None) -> int | None:
    try:
        return None if restart_count is None else restart_count()
    except Exception:  # noqa: BLE001 -- an unreadable count is unknown; /metrics still speaks
        return None


class RestartWatch:
    """`with RestartWatch(endpoint, restart_count) as w: ...`, then `w.reading(step)`."""

    def __init__(self, endpoint: EngineEndpoint, restart_count: Callable[[], int | None] | None,
                 poll_s: float = POLL_S) -> None:
        self.endpoint = endpoint
        self.restart_count = restart_count
        self.poll_s = poll_s
        self.restarts_before: int | None = None
        self.restarts_after: int | None = None
        self.scrapes_read = 0
        self.metrics_evidence: list[str] = []
        self._last: dict[str, float] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _scrape(self, client: httpx.Client) -> None:
        try:
            now = metrics.scrape(client, self.endpoint.base_url, self.endpoint.adapter)
        except (metrics.MetricsUnavailable, httpx.HTTPError, ValueError):
            return  # unreadable now (busy, restarting): the next readable scrape is compared with the last
        with self._lock:
            self.scrapes_read += 1
            if self._last is not None:
                reason = breach([self._last, now], "during the step")
                if reason and reason not in self.metrics_evidence:
                    self.metrics_evidence.append(reason)
            self._last = now

    def _poll(self) -> None:
        with self.endpoint.http_client(SCRAPE_TIMEOUT_S) as client:
            while not self._stop.wait(self.poll_s):
                self._scrape(client)

    def __enter__(self) -> RestartWatch:
        self.restarts_before = _count(self.restart_count)
        if self.endpoint.adapter.metrics_path is not None:
            with self.endpoint.http_client(SCRAPE_TIMEOUT_S) as client:
                self._scrape(client)
            self._thread = threading.Thread(target=self._poll, daemon=True, name="dayone-restart-watch")
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(SCRAPE_TIMEOUT_S + 1)
            with self.endpoint.http_client(SCRAPE_TIMEOUT_S) as client:
                self._scrape(client)
        self.restarts_after = _count(self.restart_count)

    def reading(self, step: str) -> dict[str, Any]:
        """The step's restart reading: outcome (pass | fail | not_applicable), reason, the counts
        before and after, restarts seen (None where only /metrics showed one) and the metrics' evidence."""
        before, after = self.restarts_before, self.restarts_after
        counted = after - before if before is not None and after is not None else None
        evidence = list(self.metrics_evidence)
        if counted:
            evidence.insert(0, f"the engine's restart count went from {before} to {after}")
        if evidence:
            outcome, reason = "fail", f"the engine restarted during step {step}: " + "; ".join(evidence)
            restarts = counted if counted else None
        elif before is not None and after is None:
            outcome, reason, restarts = "fail", (
                f"the engine's restart count could not be read after step {step} (engine gone?)"), None
        elif before is None and self.scrapes_read < 2:
            outcome, reason, restarts = "not_applicable", (
                f"neither the target's restart count nor two /metrics scrapes could be read around step {step}"), None
        else:
            outcome, reason, restarts = "pass", f"no restart during step {step}", 0
        return {"step": step, "outcome": outcome, "reason": reason, "restarts": restarts,
                "restarts_before": before, "restarts_after": after, "scrapes": self.scrapes_read,
                "metrics_evidence": self.metrics_evidence}


def check_row(endpoint: EngineEndpoint, reading: dict[str, Any]) -> dict[str, Any]:
    """The `engine_restarts` check row of one step (scenario = the step)."""
    evidence = {"status": None, "field": "restart_count", "excerpt": "",
                **{k: v for k, v in reading.items() if k not in ("outcome",)}}
    return {**endpoint.row_keys(reading["step"]), "check": CHECK, "outcome": reading["outcome"],
            "evidence": evidence}


def watch_step(ctx: EngineContext, step: str, restart_count: Callable[[], int | None] | None,
               run: Callable[[], dict[str, Any]], launch: int = 0) -> dict[str, Any]:
    """Run one engine step between restart readings; the `engine_restarts` row is written even when
    the step fails, and a restart marks the step's result `engine_restarted` (with `restarts`).
    `launch` > 0: the block of a step on a fresh start of the engine (measurement.launches), read on
    its own (the relaunch between blocks is no restart) and joined into the step's one row."""
    watch = RestartWatch(ctx.endpoint, restart_count)
    try:
        with watch:
            result = run()
    except Exception:
        _write(ctx, watch.reading(step), launch)
        raise
    reading = watch.reading(step)
    _write(ctx, reading, launch)
    return {**result, "engine_restarted": reading["outcome"] == "fail", "restarts": reading["restarts"]}


def _write(ctx: EngineContext, reading: dict[str, Any], launch: int = 0) -> None:
    partition = f"{CHECK}-{reading['step']}"
    if launch:
        earlier = [r for r in ctx.run_dir.read_rows("checks", ctx.endpoint.engine)
                   if r.get("check") == CHECK and r.get("scenario") == reading["step"]]
        reading = _joined(earlier[-1], reading, launch) if earlier else reading
    with ctx.run_dir.rows("checks", ctx.endpoint.engine, partition) as out:
        out.write(check_row(ctx.endpoint, reading))


def _joined(row: dict[str, Any], reading: dict[str, Any], launch: int) -> dict[str, Any]:
    """One step's reading over its launches: the earlier launches' row and launch `launch`'s reading.
    A restart in any launch fails it; restarts add up (unknown where one launch's count is)."""
    ev = row.get("evidence") or {}
    ev = json.loads(ev) if isinstance(ev, str) else ev
    outcomes = (row.get("outcome"), reading["outcome"])
    outcome = "fail" if "fail" in outcomes else "pass" if "pass" in outcomes else "not_applicable"
    reasons = [r for r in (ev.get("reason"), f"launch {launch}: {reading['reason']}") if r]
    counts = (ev.get("restarts"), reading["restarts"])
    return {**reading, "outcome": outcome,
            "reason": reading["reason"] if outcome == "pass" and outcomes == ("pass", "pass") else "; ".join(reasons),
            "restarts": 0 if outcome == "pass" else (None if None in counts else sum(counts)),
            "scrapes": (ev.get("scrapes") or 0) + reading["scrapes"],
            "metrics_evidence": [*(ev.get("metrics_evidence") or []), *reading["metrics_evidence"]],
            "launches": launch + 1}


def restart_summary(check_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Restarts over a run from its `engine_restarts` rows: the total, the steps they came in, each
    step's reading. A restart seen only in /metrics counts once (`at_least`: the total may be higher)."""
    steps: dict[str, dict[str, Any]] = {}
    for row in check_rows:
        if row.get("check") != CHECK:
            continue
        ev = row.get("evidence") or {}
        steps[str(row.get("scenario"))] = {"outcome": row.get("outcome"), "reason": ev.get("reason"),
                                           "restarts": ev.get("restarts")}
    restarted = [s for s, r in steps.items() if r["outcome"] == "fail"]
    return {
        "total": sum(int(steps[s]["restarts"] or 1) for s in restarted),
        "at_least": any(steps[s]["restarts"] is None for s in restarted),
        "restarted_steps": restarted,
        "steps": steps,
    }


# ---- before readiness --------------------------------------------------------------------------------

# A restart while the engine loads (the Day-1 report's "meaningless restarts") is judged once it is
# ready: a startup finding, `warning` when only probes killed it (the probe budget was short for this
# cold start; the engine is fine), `error` when it was OOM-killed or exited by itself (a replica with
# these settings may not come up at all). No check fails: every figure is taken after the last start.
COLD_START_FINDING = "restarted_before_ready"


def cold_start_finding(restarts: int | None, causes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The startup finding for `restarts` before the engine was first ready, with their causes; None
    when it started once (or the target cannot count)."""
    if not restarts:
        return None
    kinds = {c["cause"] for c in causes}
    severity = "error" if kinds & {"oom_killed", "exit"} else "warning"
    why = "; ".join(c["detail"] + (f" (x{c['count']})" if (c.get("count") or 1) > 1 else "") for c in causes)
    line = (f"restarted {restarts} time(s) before ready: {why or 'cause not reported by the target'}")
    return {"finding": COLD_START_FINDING, "severity": severity, "line": line}


def record_cold_start(ctx: Any, engine: str) -> dict[str, Any] | None:
    """Read the restarts of the engine's cold start now that it is ready, and write its finding (the
    startup_findings partition `cold_start`, read with the startup log's). The finding, or None."""
    dep = ctx.deployment(engine)
    restarts = _count(lambda: ctx.target.restart_count(dep))
    try:
        causes = ctx.target.restart_causes(dep) if restarts else []
    except Exception:  # noqa: BLE001 -- the count stands without its causes
        causes = []
    finding = cold_start_finding(restarts, causes)
    launch = int(dep.handle.get("launch_index") or 0)
    if launch:  # a relaunch (measurement.launches) keeps the first start's finding and adds its own
        if finding is None:
            return None
        finding = {**finding, "line": f"launch {launch}: {finding['line']}"}
    partition = f"cold_start-launch{launch}-{time.time_ns()}" if launch else "cold_start"
    with ctx.run_dir.rows("startup_findings", engine, partition) as out:
        if finding:
            out.write({**ctx.engine(engine).endpoint.row_keys("startup"), **finding})
    return finding
