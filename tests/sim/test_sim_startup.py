"""Startup: delay with the dialect's health semantics, the GLM-5.3-Flash Day 1 Hands-on report's
warning lines, and the local target driving the simulator exactly as a pipeline run does."""

from __future__ import annotations

import time

import httpx
import pytest

from tasks.config import parse_run_config
from tasks.engines import adapter_for
from tasks.state.storage import RunDir
from tasks.targets.local import LocalTarget


def test_sglang_port_is_closed_then_health_503_while_models_answers_then_serves(sims):
    """Real SGLang's start (tests/fixtures/wire/sglang-0.5.18/startup_health*.json): the port refuses while the
    scheduler loads, then the HTTP server binds and runs its own warm-up, /health 503 while /ping and /v1/models
    answer 200; then ready. The warm-up is the last quarter of the start: 5 s of 20, for the requests below to
    land in it on a loaded machine."""
    sim = sims("sglang", {"startup_delay_s": 20.0}, wait_ready=False)
    time.sleep(0.5)
    with pytest.raises(httpx.TransportError):
        httpx.get(sim.url + "/health", timeout=1)
    sim.wait_listening()
    assert httpx.get(sim.url + "/health").status_code == 503
    assert httpx.get(sim.url + "/health_generate").status_code == 503
    assert httpx.get(sim.url + "/ping").status_code == 200  # the HTTP server alone: DayOne's pod liveness
    assert httpx.get(sim.url + "/v1/models").status_code == 200  # not a readiness signal
    assert httpx.post(sim.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}).status_code == 503
    assert "Uvicorn running on" in sim.log() and "fired up" not in sim.log()
    state = sim.wait_ready(timeout_s=60)
    assert state["ready_ts"] - state["started_ts"] >= 19.9
    assert httpx.get(sim.url + "/health").status_code == 200
    assert httpx.post(sim.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}).status_code == 200
    assert "The server is fired up and ready to roll!" in sim.log()


def test_vllm_port_closed_until_started(sims):
    sim = sims("vllm", {"startup_delay_s": 1.0}, wait_ready=False)
    time.sleep(0.3)
    with pytest.raises(httpx.TransportError):
        httpx.get(sim.url + "/health", timeout=1)
    sim.wait_ready(timeout_s=30)
    assert httpx.get(sim.url + "/health").status_code == 200


@pytest.mark.parametrize("dialect", ["sglang", "vllm"])
def test_startup_log_has_the_seed_warning_kinds(sims, dialect):
    sim = sims(dialect, {"startup_delay_s": 0.2})
    findings = {f["finding"] for f in adapter_for(dialect).scan_startup_log(sim.log())}
    assert {"fallback_backend", "missing_tuned_config", "autotune_jit", "cuda_graph_capture"} <= findings


def test_local_target_deploys_the_simulator_and_reads_its_restart_count(tmp_path):
    config = parse_run_config({"run_id": "sim-target", "engines": [
        {"name": "sim-vllm", "dialect": "vllm", "sim_profile": {"startup_delay_s": 0.3, "slots": 4}}]})
    run_dir = RunDir("sim-target", root=tmp_path)
    target = LocalTarget()
    engine = config.engine("sim-vllm")
    deployment = target.deploy(config, engine, run_dir, target.pin(config, engine))
    try:
        readiness = target.wait_ready(config, deployment, timeout_s=30)
        assert readiness.ready
        assert target.restart_count(deployment) == 0
        state = httpx.get(deployment.base_url + "/sim/state").json()
        assert state["profile"]["slots"] == 4 and state["model"] == config.model.name
        assert "Using default MoE config" in target.startup_log(deployment)
    finally:
        target.teardown(config, "sim-vllm", run_dir)
    with pytest.raises(httpx.TransportError):
        httpx.get(deployment.base_url + "/health", timeout=1)


def test_cli_merges_profile_file_json_and_overrides(tmp_path):
    import subprocess
    import sys

    from tasks.sim.process import SimProcess
    from tasks.core.ports import free_port

    profile = tmp_path / "profile.yaml"
    profile.write_text("slots: 2\nseed: 5\nquirks:\n  metrics: renamed\n")
    port = free_port()
    log = tmp_path / "sim.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tasks.cli", "sim", "--dialect", "vllm", "--port", str(port),
                                 "--profile", str(profile), "--profile-json", '{"seed": 6}', "--set", "slots=3",
                                 "--itl-s", "0.001"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    with SimProcess(proc, "vllm", port, log) as sim:
        state = sim.wait_ready(timeout_s=30)
        p = state["profile"]
        assert (p["slots"], p["seed"], p["itl_s"], p["quirks"]["metrics"]) == (3, 6, 0.001, "renamed")


def test_cli_rejects_an_unknown_profile_field_naming_it():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "tasks.sim", "--port", "1", "--set", "faults.crash_after=2"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "faults.crash_after" in r.stderr and "Fix:" in r.stderr
