"""A whole evaluation on shared-nothing workers: every step a `dayone step` process of its own, with
its own empty DAYONE_WORKDIR and HOME, and the run's state under an S3 staging prefix.

A step that read an earlier step's output from the local disk would find nothing there and fail;
after each step its DAYONE_WORKDIR holds no run state (deploy leaves only the local engine's own
log, node-local by nature: tasks/targets/local.py). The verdict, the report and the archive are
then read from S3 alone.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from storage_helpers import files_under, fresh_worker_env

from tasks.state.storage import RunDir

REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
RUN_ID = "shared-nothing-run"
ENGINE = "sim-a"
ARCHIVE_BUCKET = "dayone-shared-nothing"
RUN = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 4096},
    "engines": [{"name": ENGINE, "dialect": "sglang", "launcher": "sim"}],
    "scenarios": {
        "short": {"concurrency": [1, 4], "rounds": 1, "requests_per_round": 8},
        "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
        "long_context": {"lengths": [1000, 2000], "depths": [0.5], "output_tokens": 16},
        "boundary": {"lengths": [3000], "output_tokens": 8},
        "prefix_cache": {"prompt_tokens": 2000, "repeats": 2},
    },
    "archive": {"bucket": ARCHIVE_BUCKET},
    "request_timeout_s": 30,
}


def _steps() -> list[tuple[str, str | None]]:
    """Every step of the run in the DAG's order, from the registry."""
    from tasks.config import parse_run_config
    from tasks.steps.registry import SCENARIO_STEPS, STEPS

    cfg = parse_run_config({**RUN, "run_id": RUN_ID})
    names = ["plan", "pin", "deploy", "wait_ready", *SCENARIO_STEPS, "teardown", "validate", "archive", "report"]
    enabled = [n for n in names if STEPS[n].enabled(cfg)]
    assert set(enabled) == {n for n, s in STEPS.items() if s.enabled(cfg) and n not in ("compare", "cleanup")}
    return [(n, ENGINE if STEPS[n].per_engine else None) for n in enabled]


def test_every_step_on_its_own_empty_worker_reads_run_state_from_s3_only(staging, staging_env, s3_server, tmp_path):
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(RUN))
    left_behind: dict[str, list[str]] = {}
    try:
        for i, (name, engine) in enumerate(_steps()):
            worker = tmp_path / f"worker-{i:02d}-{name}"
            env = fresh_worker_env(worker, staging_env)
            argv = [sys.executable, "-m", "tasks.cli", "step", name, "--config", str(config_file), "--run-id", RUN_ID]
            done = subprocess.run(argv + (["--engine", engine] if engine else []), cwd=REPO_ROOT, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"step {name} on an empty worker: exit {done.returncode}\n{done.stderr[-3000:]}"
            assert json.loads(done.stdout)["status"] == "ok", done.stdout
            left_behind[name] = files_under(worker / "work")
    finally:  # the engine outlives a failed step: stop it from its deployment in S3
        from tasks.config import parse_run_config
        from tasks.targets.local import LocalTarget

        LocalTarget().teardown(parse_run_config({**RUN, "run_id": RUN_ID}), ENGINE, RunDir(RUN_ID, staging))

    # Nothing of the run's state on any worker's disk: only the local engine's own log, where it runs.
    assert left_behind.pop("deploy") == [f"{RUN_ID}/logs/{ENGINE}.log"]
    assert all(files == [] for files in left_behind.values()), left_behind

    run = RunDir(RUN_ID, staging)
    from tasks.steps.execution import verdict
    from tasks.steps.registry import required_run_steps

    assert verdict(run, required_run_steps()) == []
    for doc in ("manifest.json", "pinned.json", f"deployments/{ENGINE}.json", f"state/{ENGINE}/ready.json",
                "validation.json", "archive.json", "summary.json", "report.html", f"summaries/{ENGINE}/short.json",
                f"verdicts/{ENGINE}/prefix_cache.json"):
        assert run.read_bytes(doc) is not None, f"{doc} not in {run.where()}"
    assert any(name.startswith("charts/") for name in run.store.keys("charts/"))
    measured = [r for r in run.read_rows("requests", ENGINE) if r["scenario"] == "short"]
    assert len(measured) == 16 and all(r["status"] == "ok" for r in measured)
    assert {r["check"] for r in run.read_rows("checks", ENGINE)} >= {"chat_streaming"}
    assert run.read_rows("needles", ENGINE) and run.read_rows("cache_trials", ENGINE)
    summary = json.loads(run.read_bytes("summary.json"))
    assert summary["run_id"] == RUN_ID

    s3 = s3_server.client()
    prefix = run.read_json("archive.json")["prefixes"][ENGINE]
    archived = {o["Key"][len(prefix):] for o in s3.list_objects_v2(Bucket=ARCHIVE_BUCKET, Prefix=prefix)["Contents"]}
    assert {"manifest.json", "tables/requests.parquet", "summary.json", "report.html"} <= archived
    report = s3.get_object(Bucket=ARCHIVE_BUCKET, Key=prefix + "report.html")["Body"].read()
    assert report == run.read_bytes("report.html")


@pytest.mark.parametrize(("step", "says"), [("deploy", "not pinned"), ("validate", "never planned")])
def test_a_step_finds_nothing_without_the_staging_prefix(staging, staging_env, tmp_path, step, says):
    """The control: the same step on an empty worker without DAYONE_STAGING does not find the plan."""
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(RUN))
    run_id = f"control-{step}"
    for earlier in ("plan", "pin"):  # planned and pinned, in S3
        argv = [sys.executable, "-m", "tasks.cli", "step", earlier, "--config", str(config_file), "--run-id", run_id]
        assert subprocess.run(argv, cwd=REPO_ROOT, env=fresh_worker_env(tmp_path / earlier, staging_env),
                              capture_output=True, timeout=120).returncode == 0
    assert RunDir(run_id, staging).read_json("pinned.json")
    local_only = {k: v for k, v in staging_env.items() if k != "DAYONE_STAGING"}
    argv = [sys.executable, "-m", "tasks.cli", "step", step, "--config", str(config_file), "--run-id", run_id]
    done = subprocess.run(argv + (["--engine", ENGINE] if step == "deploy" else []), cwd=REPO_ROOT,
                          env=fresh_worker_env(tmp_path / "worker", local_only), capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and says in done.stderr, f"an empty worker found run state: {done.stderr[-2000:]}"
