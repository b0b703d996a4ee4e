"""A failed request counts against its engine everywhere (issue 43, items 1 and 2), measured against plain
servers written for the test: an engine that drops the slowest 4% of a trace's requests (under the 5% round error
limit) is neither picked nor let through by the nightly; the trace step fails on failed requests as the
performance steps do; every traffic scenario feeds the choice's failed-requests criterion; a session broken at its
first turn counts the turns it never sent."""

from __future__ import annotations

import time

import pytest
from multiturn_server import MultiTurnServer
from plain_pipeline import external, scenarios
from plain_server import MODEL, PlainServer
from verdict_runs import (PURPOSES, TailServer, archive, engine_context, measure_trace, night_dir, trace_config,
                          write_trace)

from tasks.compare.nightly import RegressionFound, compare_run
from tasks.config import parse_run_config
from tasks.report import build_summary
from tasks.report.choice import choose
from tasks.state.storage import RunDir

ROUNDS = 4  # round 1 is the trace's first encounter: three steady rounds a side


def test_an_engine_dropping_its_slowest_4pct_of_trace_requests_is_not_picked(tmp_path, run_root):
    trace = write_trace(tmp_path / "trace.jsonl")
    with TailServer() as steady, TailServer(drops=True) as dropper:
        cfg = trace_config("drops-4pct", {"steady": steady.url, "dropper": dropper.url}, trace, ROUNDS)
        run_dir = RunDir("drops-4pct", run_root)
        for name, server in (("steady", steady), ("dropper", dropper)):
            measure_trace(cfg, run_dir, name, server)
    assert dropper.failed == 2 * ROUNDS and steady.failed == 0  # 4% of every round: no round failed
    summary = build_summary(run_dir, cfg)
    assert summary.engines["dropper"].trace.level.round_status == ["ok"] * ROUNDS
    choices = choose(summary, cfg.choice.orders())
    assert {c.purpose: c.picked for c in choices} == {p["name"]: ["steady"] for p in PURPOSES}, choices
    reason = next(r for r in choices[0].reasons if r.engine == "dropper" and r.stance == "against")
    assert reason.criterion == "failed_requests" and "trace" in reason.text, reason.text
    # Its P95 TTFT counts the dropped requests: no better than the engine that served them slowly.
    p95 = next(c for c in summary.comparisons if (c.scenario, c.figure) == ("trace", "ttft_p95_s"))
    assert p95.engine == "dropper" and p95.verdict != "better", p95


def test_a_night_dropping_its_slowest_4pct_of_trace_requests_is_red(s3_server, run_root, tmp_path):
    s3, bucket = s3_server.client(), f"drops-{time.time_ns()}"
    trace = write_trace(tmp_path / "trace.jsonl")
    with TailServer(slow_tail=False) as calm:  # last night: every request served fast
        cfg1 = trace_config("night-1", {"eng": calm.url}, trace, ROUNDS, bucket)
        night1 = night_dir(run_root, "night-1", 1000.0, cfg1, ["eng"])
        measure_trace(cfg1, night1, "eng", calm)
    archive(night1, cfg1, s3)
    with TailServer(drops=True) as dropper:  # tonight: a slow tail, half of it dropped (4%, a failed share the
        cfg2 = trace_config("night-2", {"eng": dropper.url}, trace, ROUNDS, bucket)  # interval cannot tell from 2%)
        night2 = night_dir(run_root, "night-2", 2000.0, cfg2, ["eng"])
        measure_trace(cfg2, night2, "eng", dropper)
    with pytest.raises(RegressionFound) as found:
        compare_run(night2, cfg2, s3)
    rows = {r["metric"]: r for r in night2.read_rows("regressions", "eng") if r["scenario"] == "trace"}
    share = next(r for m, r in rows.items() if m.startswith("failed_share"))
    assert not share["regressed"] and share["value"] == pytest.approx(0.04), share  # the share alone would pass
    ttft = next(r for m, r in rows.items() if m.startswith("ttft_p95_s"))
    assert ttft["regressed"], ttft  # the dropped tail counts in the P95: the slow tail it hid is there
    assert "eng/trace" in str(found.value) and "ttft_p95_s" in str(found.value)


class FailsMost(PlainServer):
    """Answers HTTP 500 to three generations of four."""

    _seen = 0

    def error_for(self, kind: str, body: dict) -> tuple[int, str] | None:  # type: ignore[type-arg]
        self._seen += 1
        return None if self._seen % 4 == 0 else (500, "engine fault")


def test_the_trace_step_fails_when_most_of_its_requests_failed(tmp_path, run_root):
    from tasks.steps.context import RunContext
    from tasks.steps.engine_steps import RequestsFailed, trace

    with FailsMost() as server:
        cfg = trace_config("trace-step", {"eng": server.url}, write_trace(tmp_path / "trace.jsonl"), 1)
        ctx = RunContext(cfg, RunDir("trace-step", run_root))
        engine_context(cfg, ctx.run_dir, "eng", server)
        with pytest.raises(RequestsFailed) as failed:
            trace(ctx, "eng")
    assert "measured requests failed" in str(failed.value) and "engine fault" in str(failed.value), failed.value
    assert len(ctx.run_dir.read_rows("trace_requests", "eng")) == 50  # its rows are kept as the evidence


class BreaksFirstTurns(MultiTurnServer):
    """Answers HTTP 500 to the first turn of one session in ten: its later turns are never sent."""

    def __init__(self) -> None:
        super().__init__()
        self.first_turns = 0

    async def _chat(self, request):  # noqa: ANN001, ANN202
        body = await request.json()
        if len(body.get("messages") or []) == 1:
            self.first_turns += 1
            if self.first_turns % 10 == 1:
                from aiohttp import web

                return web.json_response({"error": {"message": "engine fault"}}, status=500)
        return await MultiTurnServer._chat(self, _Replay(request, body))


class _Replay:
    """The request with its body read once already (aiohttp reads a body once)."""

    def __init__(self, request, body) -> None:  # noqa: ANN001
        self._request, self._body = request, body

    async def json(self):  # noqa: ANN202
        return self._body

    def __getattr__(self, name):  # noqa: ANN001, ANN204
        return getattr(self._request, name)


SESSIONS = {"enabled": True, "sessions": 10, "turns": 4, "concurrency": [5], "rounds": 3, "user_tokens": 6,
            "output_tokens": 4, "think_time_s": 0.0}


def _sessions_run(run_root, servers):  # noqa: ANN001, ANN202
    from tasks.scenarios.sessions import run_sessions

    cfg = parse_run_config({"run_id": "sessions-broken", "model": {"name": MODEL, "context_limit_tokens": 4096},
                            "engines": [external(n, s.url, "vllm") for n, s in servers.items()],
                            "scenarios": {**scenarios(sessions=SESSIONS), "warmup": False},
                            "request_timeout_s": 10, "choice": {"purposes": PURPOSES}})
    run_dir = RunDir("sessions-broken", run_root)
    for name, server in servers.items():
        run_sessions(engine_context(cfg, run_dir, name, server))
    return cfg, run_dir


def test_a_session_broken_at_its_first_turn_counts_its_turns_never_sent_and_drops_its_engine(run_root):
    with MultiTurnServer() as whole, BreaksFirstTurns() as broken:
        cfg, run_dir = _sessions_run(run_root, {"whole": whole, "broken": broken})
    [level] = build_summary(run_dir, cfg).engines["broken"].traffic_levels["sessions"]
    # one session of ten per round broke at turn 0: 1 failed and 3 never sent of its 4 planned turns
    assert (level.requests_failed, level.requests_ok) == (3 * 4, 3 * 36), level
    summary = build_summary(run_dir, cfg)
    choices = choose(summary, cfg.choice.orders())
    assert [c.picked for c in choices] == [["whole"], ["whole"]], choices
    reason = next(r for r in choices[0].reasons if r.engine == "broken")
    assert reason.criterion == "failed_requests" and "sessions" in reason.text, reason.text


@pytest.mark.parametrize("scenario", ["shared_prefix", "dataset"])
def test_every_traffic_scenario_feeds_the_failed_requests_criterion(scenario, run_root, tmp_path):
    import json

    from tasks.scenarios.dataset import run_dataset
    from tasks.scenarios.shared_prefix import run_shared_prefix

    class FailsOneInFour(PlainServer):
        _seen = 0

        def error_for(self, kind: str, body: dict) -> tuple[int, str] | None:  # type: ignore[type-arg]
            self._seen += 1
            return (500, "engine fault") if self._seen % 4 == 0 else None

    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"question {i} about things"}) + "\n" for i in range(12)))
    settings = {"shared_prefix": {"enabled": True, "groups": 2, "prefix_tokens": 16, "suffix_tokens": 4,
                                  "requests_per_group": 6, "output_tokens": 2, "concurrency": [2], "rounds": 4},
                "dataset": {"enabled": True, "path": str(path), "max_tokens": 2, "concurrency": [2], "rounds": 4}}
    run = {"shared_prefix": run_shared_prefix, "dataset": lambda ctx: run_dataset(ctx, None)}[scenario]
    with PlainServer() as sound, FailsOneInFour() as failing:
        servers = {"sound": sound, "failing": failing}
        cfg = parse_run_config({"run_id": f"{scenario}-failing", "model": {"name": MODEL, "context_limit_tokens": 4096},
                                "engines": [external(n, s.url, "vllm") for n, s in servers.items()],
                                "scenarios": {**scenarios(**{scenario: settings[scenario]}), "warmup": False},
                                "request_timeout_s": 10, "round_error_rate_max": 0.5,
                                "choice": {"purposes": PURPOSES}})
        run_dir = RunDir(f"{scenario}-failing", run_root)
        for name, server in servers.items():
            run(engine_context(cfg, run_dir, name, server))
    choices = choose(build_summary(run_dir, cfg), cfg.choice.orders())
    assert [c.picked for c in choices] == [["sound"], ["sound"]], choices
    reason = next(r for r in choices[0].reasons if r.engine == "failing")
    assert reason.criterion == "failed_requests" and scenario in reason.text, reason.text
