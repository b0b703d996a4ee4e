"""A real round through DayOne's client against a real engine, and its engine_rounds row: the client's TTFT and ITL
beside the engine's own histograms over the same window (tasks/telemetry/engine_metrics.py client_against_server).

The bounds the tests hold the gaps to, and why:
- TTFT: the client stamps its send before the engine's HTTP server receives the request and reads the first token
  after the engine stamped it, so client - server >= 0 up to the clocks' and floats' resolution (TTFT_BELOW_S). Above:
  on loopback the gap is the HTTP server before its arrival stamp, the stream's serialisation and the client's read,
  3.1-3.3 ms on an idle GPU host (issue 42). On this 2-core machine the engine keeps a core busy and every hand-off
  between processes may wait for one: the real vLLM's gap measured 7.0, 9.1, 10.4 and 54.8 ms, SGLang's 10.9 and
  15.0 ms, with other suites and a build beside them (load average 2-9, docs/engine-facts-*.md). TTFT_GAP_MAX_S, 100 ms, is that with room: past it
  the client's TTFT is not what the engine served.
- E2E: the same bounds as TTFT, for the same reasons: the engine stamps its E2E where it stamps its TTFT.
- ITL: a stream's gaps sum to its span on both sides, so the mean gap differs by the last token's delivery delay
  less the first's, over the stream's gaps: within TTFT_GAP_MAX_S / (output tokens - 1) either way (negative when
  the first token waited longer; vLLM -0.04 to -3.07 ms against its 235-351 ms steps, SGLang +0.02 and +0.65 ms
  against 221-237 ms, measured here). Per token, against the engine's span on the clock it stamps TTFT and E2E
  with: vLLM stamps ITL in its engine core and TTFT and E2E in its frontend, and a frontend that fell behind on a
  request's first token (a CI run, 2.6 s TTFTs: the frontend's spans 133 ms per request shorter than the core's,
  ITL -8.9 ms per token) shortens every span after the core's, the client's included. The engine's own difference,
  (E2E - TTFT) / (tokens - 1) - ITL from its three histograms, is taken out first (SGLang stamps all three in its
  tokenizer manager: about 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cpu_wait import ATTEMPTS, LOADED, pressure_share
from llamacpp_helpers import RunningEngine
from tasks.engines.context import EngineContext
from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.rounds import RoundOutcome, RoundPlan, run_round
from tasks.state.storage import RunDir

SHAPE = Shape(input_tokens=128, output_tokens=16, concurrency=4)
REQUESTS = 8
TTFT_BELOW_S = 0.001
TTFT_GAP_MAX_S = 0.100
ITL_GAP_MAX_S = TTFT_GAP_MAX_S / (SHAPE.output_tokens - 1)


def client_against_server(engine: RunningEngine, root: Path) -> tuple[RoundOutcome, dict[str, Any]]:
    """One measured round of SHAPE through DayOne's client (tasks/load/rounds.py run_round, as a performance step
    runs it); its outcome and engine_rounds row, in a run directory of the test's own."""
    ctx = engine.ctx()
    ctx = EngineContext(ctx.config, ctx.endpoint, RunDir("client-against-server", root=root))
    plan = RoundPlan(scenario="short", shape=SHAPE, round=1, requests=REQUESTS, first_encounter=False)

    async def go() -> RoundOutcome:
        async with new_session(ctx.endpoint.adapter.keeps_alive_after_stream, ctx.endpoint.access) as session:
            with ctx.run_dir.rows("requests", ctx.endpoint.engine, "short") as out:
                return await run_round(ctx, session, plan, out)

    outcome = run_async(go())
    assert outcome.row["requests_ok"] == REQUESTS, outcome.row
    rows = ctx.run_dir.read_rows("engine_rounds", ctx.endpoint.engine)
    assert len(rows) == 1, rows
    return outcome, rows[0]


def described(row: dict[str, Any]) -> str:
    """The round's figures in ms, for an assertion's message and the engine-facts docs."""
    ms = {k: None if row.get(k) is None else round(1e3 * row[k], 3)
          for k in ("client_ttft_mean_s", "server_ttft_mean_s", "ttft_gap_s", "client_itl_mean_s", "server_itl_mean_s",
                    "itl_gap_s", "client_tpot_mean_s", "tpot_gap_s", "client_e2e_mean_s", "server_e2e_mean_s",
                    "e2e_gap_s")}
    return f"{ms} ms; server_requests {row.get('server_requests')}; {row.get('timing_gap_unpublished')}"


def assert_client_stands_within_bounds(engine: RunningEngine, root: Path) -> None:
    """A real round through DayOne's client (SHAPE, REQUESTS): the engine timed exactly the client's requests, and
    the client's TTFT and ITL means stand within the bounds above of the engine's own histograms, no finding.

    A round that missed while the machine was loaded (cpu_wait.LOADED: the client waited for a core, and read a
    whole stream 150 ms late in a CI-like run at 40 minutes for the suite) runs again, up to ATTEMPTS in all, and
    the last is judged. A client that misreads the engine misses every try."""
    for attempt in range(ATTEMPTS):
        pressure = pressure_share()
        outcome, row = client_against_server(engine, root / f"try{attempt}")
        loaded = pressure()
        try:
            _hold_to_bounds(outcome, row)
            return
        except AssertionError:
            if loaded < LOADED or attempt == ATTEMPTS - 1:
                raise
            print(f"try {attempt + 1} missed while the machine was loaded ({loaded:.0%}): {described(row)}")


def _hold_to_bounds(outcome: RoundOutcome, row: dict[str, Any]) -> None:
    assert row["server_requests"] == REQUESTS and row["timing_gap_unpublished"] is None, described(row)
    assert row["client_ttft_mean_s"] == outcome.row["ttft_mean_s"]
    assert -TTFT_BELOW_S <= row["ttft_gap_s"] < TTFT_GAP_MAX_S, described(row)
    assert row["ttft_gap_finding"] is None, described(row)
    assert -TTFT_BELOW_S <= row["e2e_gap_s"] < TTFT_GAP_MAX_S, described(row)
    assert all(r.completion_tokens == SHAPE.output_tokens for r in outcome.results), "fixed length: one span per token"
    engines_own = ((row["server_e2e_mean_s"] - row["server_ttft_mean_s"]) / (SHAPE.output_tokens - 1)
                   - row["server_itl_mean_s"])
    # Fewer output events than tokens: some event carried several. vLLM's stream says which only with continuous
    # usage (tokens_per_event); the count says that it happened (a CI run: ITL +17.4 ms, TPOT -3.4 ms).
    merged = [(r.output_events, r.completion_tokens, r.tokens_per_event) for r in outcome.results
              if r.output_events < r.completion_tokens]
    if not merged:
        assert abs(row["itl_gap_s"] - engines_own) < ITL_GAP_MAX_S, (described(row), engines_own)
        assert row["itl_gap_finding"] is None, (described(row), engines_own)
    else:
        # Several tokens in an event (the engine's output handler fell behind on a loaded machine): both engines
        # count ITL per token, the client's ITL is per event, so per token (TPOT) the two must agree, and a
        # finding on the per-event gap says why it differs (seen once in CI: ITL +9.4 ms, TPOT -0.5 ms).
        assert abs(row["tpot_gap_s"] - engines_own) < ITL_GAP_MAX_S, (described(row), engines_own, merged)
        assert row["itl_gap_finding"] is None or "several tokens per event" in row["itl_gap_finding"], \
            (described(row), engines_own)
    assert row["server_itl_p50_s"] is not None and row["server_ttft_p99_s"] is not None
    print(described(row), f"engine's own ITL difference {engines_own * 1e3:+.3f} ms; "
          f"round {outcome.row['duration_s']:.1f} s")  # the measured figures (pytest -rP)
