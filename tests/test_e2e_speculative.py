"""Speculative decoding off against on through Airflow (`dag.test()`): two simulated SGLang engines that
differ in their speculative profile alone, the on one planted to answer half the copy/reverse items
differently; summary.json and the decision name exactly those items, and the on engine's acceptance
per level comes with its interval."""

from __future__ import annotations

ACCEPTANCE = 0.6
DRAFT_TOKENS = 3
SPEC_RUN = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
    "engines": [
        {"name": "sim-off", "dialect": "sglang", "launcher": "sim"},
        {"name": "sim-mtp", "dialect": "sglang", "launcher": "sim",
         "sim_profile": {"speculative": {"draft_tokens": DRAFT_TOKENS, "acceptance_rate": ACCEPTANCE},
                         "quality": {"wrong_share": {"copy_reverse": 0.5}}}},
    ],
    "scenarios": {
        "quality": {"enabled": True, "items_per_family": 8, "kv_context_tokens": [128], "nll_lengths_tokens": []},
        "warmup": False, "short": {"input_tokens": 32, "output_tokens": 16, "concurrency": [2], "rounds": 3,
                                   "requests_per_round": 4},
        "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
        "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
    },
    "archive": {"bucket": "dayone-e2e"},
    "request_timeout_s": 30,
}


def test_answers_changed_by_speculative_decoding_are_named_and_acceptance_has_an_interval(eval_dag, s3_conn,
                                                                                         run_root):
    from dayone_airflow.glue import dayone_run_id
    from tasks.report.schema import read_summary
    from tasks.state.storage import RunDir

    run = eval_dag.test(run_conf=SPEC_RUN)
    assert str(run.state).endswith("success"), run.state
    run_dir = RunDir(dayone_run_id(run.run_id), run_root)
    summary = read_summary(run_dir.read_json("summary.json"))
    [pair] = summary.speculative.pairs
    assert (pair.off, pair.on) == ("sim-off", "sim-mtp")
    wrong = {r["item_id"] for r in run_dir.read_rows("quality", "sim-mtp") if not r["correct"]}
    assert wrong and set(pair.changed) == wrong and all(i.startswith("copy_reverse-") for i in wrong)
    [short] = [a for a in pair.acceptance if a.scenario == "short"]
    assert short.rounds == 3 and short.acceptance_rate_low <= ACCEPTANCE <= short.acceptance_rate_high
    assert short.accepted_length_low <= 1 + ACCEPTANCE * DRAFT_TOKENS <= short.accepted_length_high
    leads = [d.text for d in summary.decision if d.topic == "leads"]
    changed = next(line for line in leads if line.startswith("Speculative decoding changed answers: sim-mtp"))
    assert f"{len(wrong)} of {pair.items} items" in changed and sorted(wrong)[0] in changed
    assert any(line.startswith("Speculative decoding, sim-mtp (sim ") and "acceptance short c=2 60% (CI" in line
               for line in leads), leads
    speed = [line for line in leads if line.startswith("short output throughput, sim-mtp vs sim-off")]
    assert all("Not a reason to choose sim-mtp" in line for line in speed), speed
    page = run_dir.read_bytes("report.html").decode()
    assert "<h2 id='speculative'>Speculative decoding off against on</h2>" in page
