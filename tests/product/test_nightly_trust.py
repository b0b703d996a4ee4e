"""What makes the nightly's verdict trustworthy (tasks/compare/nightly.py), one promise per test:

- failed requests regress: the failed share of a shape is compared with an interval, a shape whose
  rounds mostly failed regresses, a shape measured then and missing now regresses;
- a lasting regression stays red: a run that regressed is never the last good run, a person accepts a
  new level, and a slow drift is caught against the reference;
- a baseline of another engine (args, GPUs, tensor parallelism, model revision, GPU product) is skipped
  and named;
- capacities are ordered on decisive probes only;
- goodput obeys the capacity's TTFT rule;
- the nightly widens its intervals by the lineage's run-to-run variation, estimated from its history.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

import pytest
from product_fixtures import round_row, small_config

from tasks.compare.nightly import RegressionFound, compare_engine, compare_run
from tasks.compare.sides import Side
from tasks.config import parse_run_config
from tasks.state.storage import RunDir
from tasks.state.tables import to_frame

ENGINE = "sim-a"
EMPTY = {"checks": to_frame("checks", []), "needles": to_frame("needles", [])}


def _cfg(**extra: Any) -> Any:
    return parse_run_config({**small_config("unused"), "run_id": "now", **extra})


def _side(run_id: str, rounds: list[dict[str, Any]]) -> Side:
    return Side(run_id, to_frame("rounds", rounds), EMPTY["checks"], EMPTY["needles"], None, True)


def _rounds(run_id: str, failed: list[int], per_round: int = 10, tps: float = 100.0,
            concurrency: int = 2) -> list[dict[str, Any]]:
    """One round row per entry of `failed` (the requests that failed in it); a round above the run's
    error rate is failed and carries no figures, as tasks/stats/figures.py round_figures writes it."""
    rows = []
    for rnd, bad in enumerate(failed, start=1):
        row = round_row(run_id, ENGINE, concurrency, rnd, tps * (1 + 0.01 * rnd), 0.02 * (1 + 0.01 * rnd))
        status = "failed" if bad / per_round > 0.05 else "ok"
        row.update(requests_ok=per_round - bad, requests_failed=bad, error_rate=bad / per_round, status=status)
        if status == "failed":
            row.update(output_tps=None, ttft_p95_s=None, ttft_p50_s=None, ttft_p99_s=None)
        rows.append(row)
    return rows


def _by_metric(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["metric"]: r for r in rows}


# ---- 1. failed requests regress ------------------------------------------------------------------


def test_a_rise_of_failed_requests_is_a_regression_decided_by_its_interval():
    rows = compare_engine(_cfg(), ENGINE, None, _side("now", _rounds("now", [4, 4])),
                          {"short": _side("base", _rounds("base", [0, 0]))})
    share = _by_metric(rows)["failed_share"]
    assert share["regressed"] and share["baseline_kind"] == "last_good"
    assert share["baseline_value"] == 0.0 and share["value"] == pytest.approx(0.4)
    assert share["ci_low"] > 0.02 and share["ci_high"] > share["value"]  # the whole difference above +2 points
    assert "requests" in share["covers"]
    assert "output_tps" not in _by_metric(rows)  # no ok round now: nothing to compare throughput on


def test_a_small_rise_of_failed_requests_within_its_interval_is_not_a_regression():
    rows = compare_engine(_cfg(), ENGINE, None, _side("now", _rounds("now", [0, 1, 0], per_round=30)),
                          {"short": _side("base", _rounds("base", [0, 0, 0], per_round=30))})
    share = _by_metric(rows)["failed_share"]
    assert share["value"] == pytest.approx(1 / 90) and share["ci_low"] < 0.02 < share["ci_high"]
    assert not any(r["regressed"] for r in rows)


def test_a_shape_whose_rounds_mostly_failed_regresses_rather_than_reading_not_enough_rounds():
    # one good round of three: throughput has "not enough rounds", the shape as a whole regressed
    now = _rounds("now", [10, 0, 10])
    rows = compare_engine(_cfg(), ENGINE, None, _side("now", now), {"short": _side("base", _rounds("base", [0, 0, 0]))})
    found = _by_metric(rows)
    assert found["output_tps"]["verdict"] == "not enough rounds" and not found["output_tps"]["regressed"]
    assert found["failed_share"]["regressed"] and "2 of 3 measured rounds failed" in found["failed_share"]["verdict"]


def test_a_shape_measured_then_and_missing_now_is_a_regression():
    rows = compare_engine(_cfg(), ENGINE, None, _side("now", []), {"short": _side("base", _rounds("base", [0, 0]))})
    (missing,) = rows
    assert (missing["metric"], missing["verdict"], missing["regressed"]) == ("measured", "measured -> missing", True)


def test_a_performance_step_whose_requests_mostly_failed_fails_with_the_reason():
    from tasks.stats.figures import failed_requests

    rounds = _rounds("now", [10, 8]) + [{**_rounds("now", [0])[0], "warmup": True, "requests_ok": 50}]
    reason = failed_requests(rounds, 0.5, lambda: ["HTTP 500: boom"] * 17 + ["timeout"])
    assert reason == "18 of 20 measured requests failed (90%, more than 50%): HTTP 500: boom x17; timeout x1"
    assert failed_requests(_rounds("now", [4, 5]), 0.5) is None  # 45%: the rounds failed, the step did not


def test_the_report_of_a_night_whose_requests_all_failed_renders(tmp_path):
    from tasks.report import build_summary
    from tasks.report.charts import render_charts

    run_dir = RunDir("now", tmp_path)
    with run_dir.rows("rounds", ENGINE, "short") as out:
        for row in _rounds("now", [10, 10]):
            out.write(row)
    summary = build_summary(run_dir, _cfg())
    assert summary.engines[ENGINE].perf["short"].levels[0].rounds_failed == 2
    render_charts(summary)  # before: a log axis with nothing on it raised, and the report step failed


# ---- 2. a lasting regression stays red until accepted; drift is caught ------------------------------


@pytest.fixture()
def bucket(s3_server) -> str:
    return f"trust-{time.time_ns()}"


def _night(root: Any, s3: Any, bucket: str, run_id: str, tps: float, created_ts: float,
           accepted: tuple[str, ...] = (), **conf: Any) -> tuple[RunDir, list[dict[str, Any]], bool]:
    """One nightly run as the pipeline makes it: rounds, compare (its outcome recorded), then archive."""
    from tasks.publish.archive import archive_run
    from tasks.steps.execution import record

    cfg = parse_run_config({**small_config(bucket), "run_id": run_id, **conf})
    run_dir = RunDir(run_id, root)
    run_dir.write_json("manifest.json", {"run_id": run_id, "created_ts": created_ts, "engines": [{"name": ENGINE}],
                                         "config": cfg.model_dump(mode="json")})
    run_dir.write_json("pinned.json", {ENGINE: {"image_digest": "sha256:" + "a" * 64}})
    run_dir.write_json("validation.json", {"success": True})
    with run_dir.rows("rounds", ENGINE, "short") as out:
        for rnd, wobble in enumerate((0.98, 1.0, 1.02), start=1):
            out.write(round_row(run_id, ENGINE, 2, rnd, tps * wobble, 0.02 * wobble))
    try:
        record(run_dir, "compare", None, lambda: compare_run(run_dir, cfg, s3, *((accepted,) if accepted else ())))
        passed = True
    except RegressionFound:
        passed = False
    archive_run(run_dir, cfg, s3)
    return run_dir, run_dir.read_rows("regressions", ENGINE), passed


def test_a_run_that_regressed_never_becomes_the_last_good_run(s3_server, run_root, bucket):
    s3 = s3_server.client()
    _night(run_root, s3, bucket, "n1", 100.0, 1000.0)
    _, _, passed = _night(run_root, s3, bucket, "n2", 70.0, 2000.0)
    assert not passed
    _, rows, passed = _night(run_root, s3, bucket, "n3", 70.0, 3000.0)  # before: compared with n2, and passed
    assert not passed
    bad = [r for r in rows if r["regressed"]]
    assert {(r["metric"], r["baseline_run_id"], r["baseline_kind"]) for r in bad} == {("output_tps", "n1", "last_good")}


def test_an_accepted_run_becomes_the_last_good_run_and_the_reference_and_stays_accepted(s3_server, run_root, bucket):
    s3 = s3_server.client()
    _night(run_root, s3, bucket, "a1", 100.0, 1000.0)
    _night(run_root, s3, bucket, "a2", 70.0, 2000.0)
    run_dir, rows, passed = _night(run_root, s3, bucket, "a3", 70.0, 3000.0, accepted=("a2",))
    assert passed and rows and {(r["baseline_run_id"], r["baseline_kind"]) for r in rows} == {("a2", "last_good")}
    assert run_dir.read_json("regressions.json")["accepted"] == ["a2"]
    # The Variable cleared: the acceptance recorded in a3's index still holds.
    _, rows, passed = _night(run_root, s3, bucket, "a4", 70.0, 4000.0)
    assert passed and {r["baseline_run_id"] for r in rows if r["baseline_kind"] == "reference"} == {"a2"}


def test_a_slow_drift_under_the_threshold_each_night_is_caught_against_the_reference(s3_server, run_root, bucket):
    s3 = s3_server.client()
    verdicts = []
    for night, tps in enumerate((100.0, 96.0, 92.0, 88.0, 84.0), start=1):  # -4% a night; threshold -10%
        _, rows, passed = _night(run_root, s3, bucket, f"d{night}", tps, 1000.0 * night)
        verdicts.append(passed)
    assert verdicts == [True, True, True, True, False]
    bad = [r for r in rows if r["regressed"]]
    assert {(r["metric"], r["baseline_run_id"], r["baseline_kind"]) for r in bad} == {("output_tps", "d1", "reference")}
    last = next(r for r in rows if r["baseline_kind"] == "last_good" and r["metric"] == "output_tps")
    assert last["baseline_run_id"] == "d4" and not last["regressed"]
    # a pure drift is no run-to-run noise: the history's line is taken out before the spread is read
    assert "4 past runs" in last["covers"]


# ---- 3. unlike engines are not compared --------------------------------------------------------


@pytest.mark.parametrize("then,now,named", [
    ({"args": ["--speculative-algorithm", "EAGLE"]}, {}, "engine args ['--speculative-algorithm', 'EAGLE'] then, [] now"),
    ({"gpus": 2}, {"gpus": 1}, "gpus 2 then, 1 now"),
    ({"gpus": 2, "tensor_parallel": 1}, {"gpus": 2}, "tensor parallel 1 then, 2 now"),
])
def test_a_baseline_of_another_engine_configuration_is_skipped_and_named(s3_server, run_root, bucket, then, now,
                                                                         named):
    s3 = s3_server.client()
    engine = {"name": ENGINE, "dialect": "sglang", "launcher": "sim"}
    _night(run_root, s3, bucket, "e1", 100.0, 1000.0, engines=[{**engine, **then}])
    run_dir, rows, passed = _night(run_root, s3, bucket, "e2", 50.0, 2000.0, engines=[{**engine, **now}])
    assert passed and rows == []  # before: compared as if equal, and -50% regressed
    (line,) = run_dir.read_json("regressions.json")["skipped"]
    assert line.startswith(f"baseline e1 skipped for {ENGINE}: another engine lineage (") and named in line, line


def test_a_baseline_of_another_model_revision_or_gpu_product_is_skipped_and_in_the_report(s3_server, run_root, bucket):
    from tasks.state import documents as run_documents
    from tasks.report import build_summary

    s3 = s3_server.client()
    root_then = run_root / "then"
    base = RunDir("g1", root_then)
    base.write_json(run_documents.hardware_doc(ENGINE), {"gpu_product": "NVIDIA H100 80GB HBM3"})
    _night(root_then, s3, bucket, "g1", 100.0, 1000.0)
    now = RunDir("g2", run_root)
    now.write_json(run_documents.hardware_doc(ENGINE), {"gpu_product": "NVIDIA H200"})
    run_dir, rows, passed = _night(run_root, s3, bucket, "g2", 50.0, 2000.0,
                                   model={**small_config(bucket)["model"], "revision": "abc123"})
    assert passed and rows == []
    (line,) = run_dir.read_json("regressions.json")["skipped"]
    assert "model revision 'main' then, 'abc123' now" in line and "gpu product 'NVIDIA H100 80GB HBM3' then" in line
    summary = build_summary(run_dir, parse_run_config({**small_config(bucket), "run_id": "g2"}))
    assert summary.baselines_skipped == [line]
    assert any(d.topic == "regressions" and "skipped" in d.text and "abc123" in d.text for d in summary.decision)


# ---- 4. capacities ordered on decisive probes ------------------------------------------------------


def _probe(load: float, verdict: str, close: bool = False) -> dict[str, Any]:
    return {"load": load, "verdict": verdict, "close": close}


def _capacity(bracket: list[float], probes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"mode": "concurrency", "bracket": bracket, "capacity": bracket[0], "outcome": "found", "withheld": None,
            "text": f"{bracket[0]:g} concurrent requests", "probes": probes}


# The baseline passed 12 and this run failed 12, each by its point estimate only (close): noise, not an order.
BASE_CAPACITY = _capacity([12, 13], [_probe(4, "pass"), _probe(8, "pass"), _probe(16, "fail"), _probe(12, "pass", True),
                                     _probe(14, "fail"), _probe(13, "fail")])
NOW_CAPACITY = _capacity([11, 12], [_probe(4, "pass"), _probe(8, "pass"), _probe(16, "fail"), _probe(12, "fail", True),
                                    _probe(10, "pass"), _probe(11, "pass")])


def test_capacities_whose_brackets_rest_on_close_probes_are_not_ordered():
    from tasks.scenarios.capacity import decisive_bracket, order

    assert decisive_bracket(BASE_CAPACITY) == (8, 13) and decisive_bracket(NOW_CAPACITY) == (11, 16)
    assert order(NOW_CAPACITY, BASE_CAPACITY) == "overlap"  # before: "less", a regression
    decisive = _capacity([11, 12], [{**p, "close": False} for p in NOW_CAPACITY["probes"]])
    assert order(decisive, {**BASE_CAPACITY, "probes": [{**p, "close": False} for p in BASE_CAPACITY["probes"]]}) \
        == "less"
    base = Side("base", to_frame("rounds", []), EMPTY["checks"], EMPTY["needles"], None, True, BASE_CAPACITY)
    now = Side("now", to_frame("rounds", []), EMPTY["checks"], EMPTY["needles"], None, True, NOW_CAPACITY)
    (row,) = compare_engine(_cfg(), ENGINE, None, now, {"capacity": base})
    assert not row["regressed"] and row["verdict"].startswith("no detectable difference")


def test_the_decision_orders_capacities_on_decisive_probes_too():
    from tasks.report.decision import capacity_order
    from tasks.report.schema.capacity import Capacity

    def model(doc: dict[str, Any]) -> Capacity:
        probes = [{"probe": i, "phase": "bracket", "rounds": 2, "requests": 8, "requests_good": 8, "round_shares": [],
                   "goodput_share": 1.0, "ci_low": 0.9, "ci_high": 1.0, **p} for i, p in enumerate(doc["probes"])]
        return Capacity.model_validate({**doc, "input_tokens": 64, "output_tokens": 64, "target_goodput_share": 0.9,
                                        "confidence": 0.95, "start": 4, "max": 16, "step": 1, "probes": probes})

    assert capacity_order(model(NOW_CAPACITY), model(BASE_CAPACITY)).startswith("no detectable difference")


# ---- 6. goodput obeys the capacity's TTFT rule --------------------------------------------------------


@pytest.mark.parametrize("slo,published", [({"ttft_s": 0.5}, False), ({"tpot_s": 0.05}, False),
                                           ({"e2e_s": 5.0}, True)])
def test_goodput_is_withheld_with_the_capacity_where_the_ttft_it_is_judged_on_is_unreliable(tmp_path, slo, published):
    from tasks.stats.figures import slo_judged_withheld
    from tasks.report import build_summary
    from tasks.scenarios.capacity import published as published_capacity

    run_dir = RunDir("now", tmp_path)
    with run_dir.rows("rounds", ENGINE, "short") as out:  # no streamed events: streaming never shown
        for row in _rounds("now", [0, 0]):
            out.write({**row, "goodput_rps": 3.0})
    summary = build_summary(run_dir, _cfg(slo=slo))
    assert not summary.engines[ENGINE].ttft_published
    level = summary.engines[ENGINE].perf["short"].levels[0]
    assert ("goodput_rps" in level.figures) is published  # before: published whatever the SLO
    capacity = published_capacity({"capacity": 12, "text": "12"}, False, parse_run_config(
        {**small_config("xyz"), "slo": slo}).slo)
    assert (capacity["capacity"] is not None) is published  # one rule for both
    if not published:
        assert capacity["withheld"].startswith(slo_judged_withheld(False, slo))


def test_dayone_bench_withholds_goodput_by_the_same_rule(tmp_path):
    from tasks.cli.bench import _apply_stream_rule

    run_dir = RunDir("bench", tmp_path)
    summary = {"slo": {"ttft_s": 0.5, "tpot_s": None, "e2e_s": None},
               "scenarios": {"short": {"levels": [{"figures": {"goodput_rps": {"median": 3.0}, "output_tps": {},
                                                               "ttft_p95_s": {}},
                                                   "first_encounter": None}]}}}
    _apply_stream_rule(summary, run_dir, ENGINE)  # no requests: streaming never shown
    assert set(summary["scenarios"]["short"]["levels"][0]["figures"]) == {"output_tps"}


# ---- 7. the nightly's intervals cover the lineage's run-to-run variation ---------------------------------


def test_the_between_run_estimate_needs_four_runs_and_takes_a_drift_for_no_noise():
    from tasks.stats.history import between_run_log_sd

    steady = [[100.0, 101.0, 99.0]] * 3
    assert between_run_log_sd(steady) is None  # 3 runs: unknown, not zero
    drift = [[v * 0.99, v, v * 1.01] for v in (100.0, 96.0, 92.0, 88.0, 84.0)]
    assert between_run_log_sd(drift).log_sd < 0.005
    rng = random.Random(7)
    runs = [[100 * math.exp(launch + rng.gauss(0, 0.01)) for _ in range(3)]
            for launch in (rng.gauss(0, 0.05) for _ in range(40))]
    found = between_run_log_sd(runs)
    assert found.runs == 40 and found.df == 38 and 0.035 < found.log_sd < 0.065


def test_widened_intervals_cover_an_unchanged_run_across_launches():
    """A lineage whose every run starts the engine anew (launch effect sd 5%, rounds 1%): the interval of
    an unchanged run against its last good run, from rounds alone, rarely covers 1; widened by the
    between-run sd its history shows, it does about 95% of the time."""
    rng = random.Random(11)
    cfg = _cfg()
    covered = {"rounds only": 0, "widened": 0}
    reps = 200
    rows = [round_row(f"{i}-{j}", ENGINE, 2, rnd, 100 * math.exp(launch + rng.gauss(0, 0.01)), 0.02)
            for i in range(reps) for j in range(7)  # 6 past good runs, then this one
            for launch in (rng.gauss(0, 0.05),) for rnd in (1, 2, 3)]
    sides = {str(run_id): Side(str(run_id), g.reset_index(drop=True), EMPTY["checks"], EMPTY["needles"], None, True)
             for run_id, g in to_frame("rounds", rows).groupby("run_id")}  # one frame: building frames is slow
    for i in range(reps):
        past, now = [sides[f"{i}-{j}"] for j in reversed(range(6))], sides[f"{i}-6"]
        for kind, history in (("rounds only", None), ("widened", {"short": past})):
            rows = compare_engine(cfg, ENGINE, None, now, {"short": past[0]}, histories=history)
            tps = _by_metric(rows)["output_tps"]
            covered[kind] += tps["ci_low"] <= 1 <= tps["ci_high"]
            if kind == "widened":
                assert "run-to-run variation estimated from 6 past runs" in tps["covers"]
    print({k: v / reps for k, v in covered.items()})
    assert covered["rounds only"] / reps < 0.5
    assert covered["widened"] / reps >= 0.9


def test_the_accept_variable_names_one_run_or_several(monkeypatch):
    from dayone_airflow.pipeline import NIGHTLY_ACCEPT_VARIABLE, nightly_accepted

    monkeypatch.setenv(f"AIRFLOW_VAR_{NIGHTLY_ACCEPT_VARIABLE.upper()}", "run-1, run-2 run-1")
    assert nightly_accepted() == ("run-1", "run-2")
    monkeypatch.delenv(f"AIRFLOW_VAR_{NIGHTLY_ACCEPT_VARIABLE.upper()}")
    assert nightly_accepted() == ()


# ---- 11. the weights a moving revision served -------------------------------------------------------


def _served(root: Any, run_id: str, served: dict[str, Any] | None) -> None:
    from tasks.state import documents as run_documents
    from tasks.evidence.revision import revision_identity

    record = revision_identity({"model": {"revision": "main"}}, served)
    RunDir(run_id, root).write_json(run_documents.served_revision_doc(ENGINE), record)


def test_a_baseline_that_served_other_weights_under_the_same_moving_revision_is_skipped(s3_server, run_root, bucket):
    s3 = s3_server.client()
    _served(run_root / "then", "w1", {"weights_sha256": "a" * 64})
    _night(run_root / "then", s3, bucket, "w1", 100.0, 1000.0)
    _served(run_root, "w2", {"weights_sha256": "b" * 64})
    run_dir, rows, passed = _night(run_root, s3, bucket, "w2", 50.0, 2000.0)
    assert passed and rows == []  # before: 'main' both nights, compared as equal, and -50% regressed
    (line,) = run_dir.read_json("regressions.json")["skipped"]
    assert f"served weights sha256:{'a' * 64} then, sha256:{'b' * 64} now" in line, line


def test_a_baseline_whose_moving_revision_served_unidentified_weights_is_compared_with_a_caveat(
        s3_server, run_root, bucket):
    from tasks.report import build_summary

    s3 = s3_server.client()
    _served(run_root / "then", "u1", None)
    _night(run_root / "then", s3, bucket, "u1", 100.0, 1000.0)
    _served(run_root, "u2", {"weights_sha256": "c" * 64})
    run_dir, rows, passed = _night(run_root, s3, bucket, "u2", 100.0, 2000.0)
    assert passed and rows and not run_dir.read_json("regressions.json")["skipped"]
    (caveat,) = run_dir.read_json("regressions.json")["caveats"]
    assert caveat.startswith(f"baseline u1 compared for {ENGINE} with a moving model revision"), caveat
    summary = build_summary(run_dir, parse_run_config({**small_config(bucket), "run_id": "u2"}))
    assert summary.baseline_caveats == [caveat]
    assert any(d.topic == "regressions" and "moving model revision" in d.text for d in summary.decision)


def _resolved(root: Any, run_id: str, commit: str) -> None:
    """The pin step resolved `main` to `commit` and the engine started with it, reporting nothing of its own."""
    from tasks.evidence.revision import revision_identity
    from tasks.state import documents as run_documents

    run_dir = RunDir(run_id, root)
    run_dir.write_json(run_documents.MODEL_REVISION, {"configured": "main", "commit": commit})
    run_dir.write_json(run_documents.served_revision_doc(ENGINE),
                       revision_identity({"model": {"revision": "main"}}, None, commit))


def test_a_baseline_whose_moving_revision_resolved_to_another_commit_is_skipped(s3_server, run_root, bucket):
    s3 = s3_server.client()
    _resolved(run_root / "then", "r1", "1" * 40)
    _night(run_root / "then", s3, bucket, "r1", 100.0, 1000.0)
    _resolved(run_root, "r2", "2" * 40)
    run_dir, rows, passed = _night(run_root, s3, bucket, "r2", 50.0, 2000.0)
    assert passed and rows == []  # before: 'main' both nights, the commits unread, and -50% regressed
    (line,) = run_dir.read_json("regressions.json")["skipped"]
    assert f"served weights {'1' * 40} then, {'2' * 40} now" in line, line


def test_a_baseline_of_another_weights_variant_is_skipped(s3_server, run_root, bucket):
    s3 = s3_server.client()
    engine = {"name": ENGINE, "dialect": "sglang", "launcher": "sim"}
    _night(run_root / "then", s3, bucket, "v1", 100.0, 1000.0)
    run_dir, rows, passed = _night(run_root, s3, bucket, "v2", 50.0, 2000.0,
                                   engines=[{**engine, "weights_variant": "fp8"}])
    assert passed and rows == []  # before: the fp8 night compared with the bf16 one, and -50% regressed
    (line,) = run_dir.read_json("regressions.json")["skipped"]
    assert "weights variant" in line and "'fp8'" in line, line
