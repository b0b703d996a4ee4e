"""The sessions scenario against a multi-turn server written for the test (multiturn_server.py): every turn
carries the whole conversation, the server's own answers included, and the cached share per turn is the
server's own; a client that drops a turn is refused and the scenario fails it."""

from __future__ import annotations

from pathlib import Path

from multiturn_server import MultiTurnServer
from plain_server import MODEL

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.state.storage import RunDir
from tasks.scenarios import sessions

SESSIONS = {"enabled": True, "sessions": 3, "concurrency": [2], "turns": 4, "user_tokens": 6, "output_tokens": 5,
            "think_time_s": 0.01, "rounds": 2, "seed": 7}


def _ctx(tmp_path: Path, url: str, **settings) -> EngineContext:
    cfg = parse_run_config({"run_id": "sessions-plain", "model": {"name": MODEL},
                            "engines": [{"name": "eng", "dialect": "vllm", "launcher": "external", "endpoint": url}],
                            "scenarios": {"sessions": {**SESSIONS, **settings}}})
    return EngineContext(cfg, endpoint_for(cfg, "eng", url, "sha256:" + "0" * 64), RunDir("sessions-plain", root=tmp_path))


def test_every_turn_carries_the_whole_conversation_and_reads_the_servers_cache(tmp_path):
    with MultiTurnServer() as server:
        ctx = _ctx(tmp_path, server.url)
        summary = sessions.run_sessions(ctx)
    rows = ctx.run_dir.read_rows("session_turns", "eng")
    assert server.refused == []
    assert len(rows) == 2 * 3 * 4 and {r["status"] for r in rows} == {"ok"}
    assert [r["messages_sent"] for r in rows if r["session"] == 0 and r["round"] == 1] == [1, 3, 5, 7]
    assert sessions.failed_turns(rows, 0.0) is None
    turns = summary["levels"][0]["turns"]
    for t, figures in enumerate(turns):  # the share the server itself reported, per turn index
        truth = [x for x in server.turns if x["turn"] == t]
        assert figures["ok"] == len(truth) == 6
        assert figures["cached_share"] == sum(x["cached_tokens"] for x in truth) / sum(x["prompt_tokens"] for x in truth)
        assert figures["cached_reported"] == 6 and figures["ttft_median_interval_s"] is not None
    assert turns[0]["cached_share"] == 0 and turns[3]["cached_share"] > turns[1]["cached_share"] > 0.5


def test_think_times_are_waited_before_each_later_turn(tmp_path):
    with MultiTurnServer() as server:
        ctx = _ctx(tmp_path, server.url, think_time_s=0.2, think_distribution="constant", turns=2, rounds=1,
                   concurrency=[3])
        sessions.run_sessions(ctx)
    rows = ctx.run_dir.read_rows("session_turns", "eng")
    for s in range(3):
        first, second = sorted((r for r in rows if r["session"] == s), key=lambda r: r["turn"])
        assert second["think_s"] == 0.2
        # send_ts is a wall-clock stamp and e2e_s a monotonic duration: their sum may sit a fraction of a
        # millisecond off the moment the answer ended (seen: 0.1 ms), so the wait is checked to 2 ms
        assert second["send_ts"] - (first["send_ts"] + first["e2e_s"]) >= 0.2 - 0.002


def test_a_client_that_drops_a_turn_is_refused_and_fails_the_scenario(tmp_path, monkeypatch):
    def forgets_its_answers(history, user_message):  # a client that sends only the user's side
        return [m for m in history if m["role"] == "user"] + [{"role": "user", "content": user_message}]

    monkeypatch.setattr(sessions, "conversation", forgets_its_answers)
    with MultiTurnServer() as server:
        ctx = _ctx(tmp_path, server.url)
        sessions.run_sessions(ctx)
    rows = ctx.run_dir.read_rows("session_turns", "eng")
    assert server.refused and all("does not carry the whole conversation" in why for why in server.refused)
    by_turn = {t: {r["status"] for r in rows if r["turn"] == t} for t in range(4)}
    assert by_turn == {0: {"ok"}, 1: {"error"}, 2: {"not_sent"}, 3: {"not_sent"}}
    assert {r["http_status"] for r in rows if r["turn"] == 1} == {400}
    reason = sessions.failed_turns(rows, 0.5)
    assert reason is not None and "18 of 24 planned turns did not complete" in reason


def test_poisson_sessions_start_at_their_rate_uncapped(tmp_path):
    with MultiTurnServer() as server:
        ctx = _ctx(tmp_path, server.url, arrival="poisson", rates=[50.0], concurrency=[1], turns=2, rounds=1,
                   sessions=6, output_tokens=20)
        summary = sessions.run_sessions(ctx)
    rows = ctx.run_dir.read_rows("session_turns", "eng")
    assert server.refused == [] and len(rows) == 12 and {r["status"] for r in rows} == {"ok"}
    assert {(r["concurrency"], r["rate_rps"]) for r in rows} == {(None, 50.0)}
    assert summary["levels"][0]["rate_rps"] == 50.0 and summary["levels"][0]["sessions"] == 6
    spans = sorted((min(r["send_ts"] for r in rows if r["session"] == k),
                    max(r["send_ts"] + r["e2e_s"] for r in rows if r["session"] == k)) for k in range(6))
    # a session starts while an earlier one is still running: arrivals are not held back by a cap
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))
