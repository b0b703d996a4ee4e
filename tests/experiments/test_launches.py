"""Replicated launches: each engine started `measurement.launches` times in a run, rounds nested in launches.

The rounds of one deployment share its speed, so an interval from them covers round-to-round noise only,
and the next run (new processes) may land outside it. With launches, every performance scenario starts
the engines anew before each further block of rounds, and a comparison's interval comes from one value
per launch (the geometric mean of its rounds), paired by launch when the engines are up together.

The simulator plants the between-launch variation: `launch_speed_sd` gives each process start its own
speed, drawn from the profile's seed and the launch index. Base and variant differ only in that seed,
so no difference is true; seed 5 against seed 0 draws a variant 50% then 20% faster on launches 0 and 1,
which the rounds within each launch confirm to a few percent.
"""

from __future__ import annotations

import math

import pytest

from tasks.stats.effects import COVERS_ROUNDS, effect

ROUNDS = 3
LAUNCH_SPEED_SD = 0.3
VARIANT = "sim-seed5"

LAUNCHED_RUN = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
    "engines": [{"name": "sim", "dialect": "vllm", "launcher": "sim",
                 "sim_profile": {"ttft_base_s": 0.001, "itl_s": 0.005, "launch_speed_sd": LAUNCH_SPEED_SD}}],
    "experiment": {"base": "sim", "factors": [{"setting": "sim_profile.seed", "levels": [0, 5]}]},
    "measurement": {"launches": 2},
    "scenarios": {
        "functional": {"enabled": False},
        "short": {"input_tokens": 64, "output_tokens": 48, "concurrency": [2], "rounds": ROUNDS,
                  "requests_per_round": 8},
        "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
        "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
    },
    "archive": {"bucket": "dayone-launches"},
    "request_timeout_s": 30,
}


@pytest.fixture(scope="module")
def launched(eval_dag, s3_server, tmp_path_factory):
    """One dayone_eval run with two launches; its run directory and summary."""
    from dayone_airflow.glue import dayone_run_id
    from tasks.report.schema import RunSummary
    from tasks.state.storage import RunDir

    root = tmp_path_factory.mktemp("launches")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAYONE_WORKDIR", str(root))
        mp.setenv("AIRFLOW_CONN_DAYONE_S3", s3_server.connection_uri())
        run = eval_dag.test(run_conf=LAUNCHED_RUN)
        assert str(run.state).endswith("success"), run.state
        run_dir = RunDir(dayone_run_id(run.run_id), root)
        summary = RunSummary.model_validate(run_dir.read_json("summary.json"))
    return run_dir, summary


def _comparison(summary, figure: str = "output_tps"):
    [c] = [c for c in summary.comparisons if c.scenario == "short" and c.figure == figure and c.engine == VARIANT]
    return c


def test_launches_is_a_validated_setting():
    from tasks.config import ConfigError, parse_run_config

    assert parse_run_config({}).measurement.launches == 1  # one deployment, as before
    with pytest.raises(ConfigError, match=r"measurement\.launches: .*greater than or equal to 1"):
        parse_run_config({"measurement": {"launches": 0}})


def test_rounds_nest_in_launches_and_each_launch_is_a_fresh_start(launched):
    run_dir, summary = launched
    for engine in ("sim", VARIANT):
        rounds = [r for r in run_dir.read_rows("rounds", engine) if r["scenario"] == "short"]
        assert sorted((r["launch"], r["round"]) for r in rounds) == [
            (launch, launch * ROUNDS + n) for launch in (0, 1) for n in range(1, ROUNDS + 1)]
        requests = [r for r in run_dir.read_rows("requests", engine) if r["scenario"] == "short"]
        assert {r["launch"] for r in requests} == {0, 1}
        assert all(r["launch"] == (r["round"] - 1) // ROUNDS for r in requests)
        # the fresh start met the shape in a warmup round of its own, not in a measured round
        assert not any(r["first_encounter"] for r in rounds)
        starts = run_dir.read_json(f"summaries/{engine}/short.json")["launches"]
        assert [s["launch"] for s in starts] == [0, 1]
        assert starts[0]["pid"] != starts[1]["pid"], starts  # another process
        assert all(s["ready_waited_s"] is not None for s in starts), starts  # each readiness recorded
        assert [x.launch for x in summary.engines[engine].perf["short"].launches] == [0, 1]
    assert run_dir.read_json("validation.json")["success"]  # the launch column passes its suite


def test_the_interval_covers_the_launches_and_holds_the_planted_between_launch_effect(launched):
    run_dir, summary = launched
    c = _comparison(summary)
    assert c.launches == 2 and c.paired
    assert "launch-to-launch variation (2 launches of each engine" in c.covers, c.covers
    # Nothing differs but each start's speed: the launch-level interval holds 1, as it must.
    assert c.verdict == "no detectable difference", c
    assert c.low < 1 < c.high, c
    lead = next(d.text for d in summary.decision if d.topic == "leads" and "output throughput" in d.text)
    assert "covering launch-to-launch variation (2 launches" in lead, lead  # the verdict says what it covers
    assert "launches a side would detect 5%" in lead, lead  # the replicate is the launch

    # The planted effect is there: the same rounds taken as replicates call a difference that is not.
    def steady(engine):
        return [r["output_tps"] for r in sorted(run_dir.read_rows("rounds", engine), key=lambda r: r["round"])
                if r["scenario"] == "short"]

    by_round = effect(steady("sim"), steady(VARIANT), paired=True)
    assert by_round.covers == COVERS_ROUNDS
    assert by_round.verdict == "higher", by_round
    assert by_round.high < c.high and by_round.low > c.low  # the launch-level interval is the wider
    launch_ratios = [math.prod(steady(VARIANT)[i:i + ROUNDS]) / math.prod(steady("sim")[i:i + ROUNDS])
                     for i in (0, ROUNDS)]
    # both launches drew a faster variant: 50% and 20% planted; a starved machine shrinks a fast engine's lead
    # (every token's sleep runs late by the same), and four test workers on two cores measured the 20% as 8%
    assert all(r ** (1 / ROUNDS) > 1.05 for r in launch_ratios), launch_ratios
