"""A trace round where the client fell behind decides nothing (issue 43, item 9): against plain servers written for
the test, the client's own process is stopped for real (SIGSTOP, as a starved core would stop it) in the measured
rounds of one engine or night, so its requests leave late and its round ends late, with lower output throughput.
That engine is not dropped for it in the choice, nor is that night red in the nightly; the report, the choice and
the nightly's rows say which round was left out and why, and the advice names settings the run config has."""

from __future__ import annotations

import re
import signal
import statistics
import threading
import time
from typing import Any

import psutil
import pytest
from verdict_runs import TailServer, archive, measure_trace, night_dir, trace_config, write_trace

from tasks.compare.nightly import RegressionFound, compare_run
from tasks.config import RunConfig
from tasks.config.traffic import BEHIND_FIX
from tasks.report import build_summary
from tasks.report.choice import choose
from tasks.state.storage import RunDir

ROUNDS = 4  # round 1 a first encounter (left out anyway); rounds 2-4 measured
STALL_S = 1.5  # the client stopped this long, from its first request on: longer than the 1 s window
LATENESS_MAX_S = 0.2  # above a loaded machine's own lateness, far below a stalled client's


class ClientStaller:
    """Stops the load client's shard processes (children of this process running tasks.load.shards) for
    STALL_S once each has connected to `port`, in every round after the first: the client falls behind for real."""

    def __init__(self, port: int) -> None:
        self.port, self.stalled, self.seen = port, [], set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ClientStaller:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _shards(self) -> list[psutil.Process]:
        out = []
        for p in psutil.Process().children(recursive=True):
            try:
                if "_shard_main" in " ".join(p.cmdline()):
                    out.append(p)
            except psutil.Error:
                continue
        return out

    def _run(self) -> None:
        rounds = 0
        while not self._stop.is_set():
            for p in self._shards():
                if p.pid in self.seen:
                    continue
                try:
                    sending = any(c.raddr and c.raddr.port == self.port for c in p.net_connections("tcp"))
                except psutil.Error:
                    continue
                if not sending:
                    continue
                self.seen.add(p.pid)
                rounds += 1
                if rounds >= 2:
                    p.send_signal(signal.SIGSTOP)
                    time.sleep(STALL_S)
                    p.send_signal(signal.SIGCONT)
                    self.stalled.append(rounds)
            time.sleep(0.005)


def _config(run_id: str, servers: dict[str, TailServer], trace, bucket: str = "unused") -> RunConfig:  # noqa: ANN001
    cfg = trace_config(run_id, {n: s.url for n, s in servers.items()}, trace, ROUNDS, bucket)
    data = cfg.model_dump(mode="json")
    data["scenarios"]["trace"]["lateness_p99_max_s"] = LATENESS_MAX_S
    data["load"]["client_processes"] = 1
    from tasks.config import parse_run_config

    return parse_run_config(data)


def _measure(cfg: RunConfig, run_dir: RunDir, name: str, server: TailServer, stall: bool) -> dict[str, Any]:
    if not stall:
        return measure_trace(cfg, run_dir, name, server)
    with ClientStaller(int(server.url.rsplit(":", 1)[1].split("/")[0])) as staller:
        result = measure_trace(cfg, run_dir, name, server)
    assert staller.stalled == [2, 3, 4], staller.stalled
    return result


def test_a_client_that_fell_behind_does_not_drop_its_engine_in_the_choice(run_root, tmp_path):
    trace = write_trace(tmp_path / "trace.jsonl")
    servers = {"stalled": TailServer(slow_tail=False, first_s=0.02), "kept": TailServer(slow_tail=False, first_s=0.02)}
    for server in servers.values():
        server.__enter__()
    try:
        cfg = _config("client-behind", servers, trace)
        run_dir = RunDir("client-behind", run_root)
        for name, server in servers.items():
            _measure(cfg, run_dir, name, server, stall=name == "stalled")
    finally:
        for server in servers.values():
            server.__exit__(None, None, None)
    summary = build_summary(run_dir, cfg)
    stalled = summary.engines["stalled"].trace
    assert [r.behind for r in stalled.rounds] == [False, True, True, True], [r.lateness_p99_s for r in stalled.rounds]
    assert all(r.lateness_p99_s > LATENESS_MAX_S for r in stalled.rounds[1:])
    # Its late rounds sent the trace's arrivals a second and a half late: a round that long has less output/s.
    kept_tps = statistics.median(r.output_tps for r in summary.engines["kept"].trace.rounds[1:])
    assert max(r.output_tps for r in stalled.rounds[1:]) < 0.8 * kept_tps, (stalled.rounds, kept_tps)
    choices = choose(summary, cfg.choice.orders())
    assert [c.picked for c in choices] == [["stalled", "kept"], ["stalled", "kept"]], choices
    assert stalled.level is not None and stalled.level.rounds == [1]  # the late rounds are out of its level
    assert not any(c.scenario == "trace" and c.verdict in ("better", "worse") for c in summary.comparisons)
    shown = [r.text for r in choices[0].reasons if r.engine == "stalled"]
    assert any("trace round 2 left out, the client fell behind" in t for t in shown), shown
    assert len(stalled.left_out) == 3 and stalled.left_out[0].startswith("round 2: lateness p99 ")
    assert "load.client_processes" in stalled.left_out[0] and "scenarios.trace.speed" in stalled.left_out[0]
    from tasks.report.html import render_html

    page = render_html(summary)
    assert "round 2: lateness p99" in page and "load.client_processes" in page


def _two_nights(s3, run_root, trace, bucket: str, stalled: int):  # noqa: ANN001, ANN202
    """Two nights against the same server, the client stopped on night `stalled`; the first archived, the second
    measured and returned (its run dir and config) for the nightly to compare."""
    nights = []
    for n in (1, 2):
        with TailServer(slow_tail=False, first_s=0.02) as server:
            cfg = _config(f"night-{n}", {"eng": server}, trace, bucket)
            run_dir = night_dir(run_root, f"night-{n}", 1000.0 * n, cfg, ["eng"])
            _measure(cfg, run_dir, "eng", server, n == stalled)
        nights.append((run_dir, cfg))
    archive(*nights[0], s3)
    return nights[1]


def test_a_night_whose_client_fell_behind_is_not_red(s3_server, run_root, tmp_path):
    s3, bucket = s3_server.client(), f"behind-{time.time_ns()}"
    trace = write_trace(tmp_path / "trace.jsonl")
    night2, cfg2 = _two_nights(s3, run_root, trace, bucket, stalled=2)  # tonight the client was stopped
    compare_run(night2, cfg2, s3)  # no regression raised: tonight's measured rounds are the client's, not the trace's
    rows = {r["metric"]: r for r in night2.read_rows("regressions", "eng") if r["scenario"] == "trace"}
    behind = next(r for m, r in rows.items() if m.startswith("client_behind"))
    assert not behind["regressed"], behind
    assert behind["verdict"].startswith("left out: tonight's round 2: lateness p99 "), behind
    assert "tonight's round 4" in behind["verdict"] and "night-1's" not in behind["verdict"]
    assert not any(m.startswith(("ttft_p95_s", "output_tps")) for m in rows), rows


def test_a_late_baseline_round_is_named_as_the_baselines(s3_server, run_root, tmp_path):
    """The other way round: last night's client fell behind, tonight's did not; last night's late rounds are left
    out of the comparison and named as the baseline's."""
    s3, bucket = s3_server.client(), f"behind-base-{time.time_ns()}"
    trace = write_trace(tmp_path / "trace.jsonl")
    night2, cfg2 = _two_nights(s3, run_root, trace, bucket, stalled=1)
    try:
        compare_run(night2, cfg2, s3)
    except RegressionFound as exc:  # a steady night against a baseline whose rounds were the client's
        pytest.fail(f"red against a baseline whose client fell behind: {exc}")
    rows = {r["metric"]: r for r in night2.read_rows("regressions", "eng") if r["scenario"] == "trace"}
    behind = next(r for m, r in rows.items() if m.startswith("client_behind"))
    assert behind["verdict"].startswith("left out: night-1's round 2: lateness p99 "), behind


def test_the_advice_names_settings_the_run_config_has():
    """Every dotted name the advice gives (and the limit's own fix) resolves to a field of the run config."""
    from tasks.config import RunConfig as Model
    from tasks.config.traffic import TraceScenario

    fix = TraceScenario.model_fields["lateness_p99_max_s"].metadata
    texts = [BEHIND_FIX, *(m.text for m in fix if hasattr(m, "text"))]
    names = sorted({n for t in texts for n in re.findall(r"\b[a-z_]{2,}(?:\.[a-z_0-9]{2,})+\b", t)})
    assert {"load.client_processes", "scenarios.trace.speed"} <= set(names), names
    for name in names:
        model: Any = Model
        for part in name.split("."):
            assert part in model.model_fields, f"{name}: no {part} in {model.__name__}"
            annotation = model.model_fields[part].annotation
            model = next((a for a in (annotation, *getattr(annotation, "__args__", ())) if hasattr(a, "model_fields")),
                         None) if part != name.split(".")[-1] else None
