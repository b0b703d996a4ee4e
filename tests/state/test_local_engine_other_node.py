"""A local engine seen from a node that did not start it: everything through the run state in S3 and the
engine's endpoint, nothing from the disk (tasks/targets/local.py, tasks/targets/keeper.py).

The engine is deployed on this machine; the steps after it run as "another node" (a host name of its own),
each with a fresh LocalTarget over the same S3 run state. The engine's log file is moved away after deploy:
a read of it by path would find nothing, so the startup log must come from the keeper's copy.
"""

from __future__ import annotations

import socket

import httpx
import pytest

from tasks.config import parse_run_config
from tasks.state.storage import RunDir
from tasks.state.documents import engine_exit_doc, engine_log_doc
from tasks.targets import local
from tasks.engines.readiness import DeployError
from tasks.targets.local import LocalTarget

RUN_ID = "other-node-run"
ENGINE = "sim-sglang"


def test_another_node_reads_the_log_and_stops_the_engine_through_the_run_state(staging, monkeypatch, tmp_path):
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "node-a"))
    config = parse_run_config({"run_id": RUN_ID, "engines": [
        {"name": ENGINE, "dialect": "sglang", "launcher": "sim", "sim_profile": {"startup_delay_s": 0.2}}]})
    run_dir = RunDir(RUN_ID, staging)
    engine = config.engine(ENGINE)
    deployer = LocalTarget(run_dir)
    dep = deployer.deploy(config, engine, run_dir, deployer.pin(config, engine))
    try:
        log_file = dep.handle["log"]
        monkeypatch.setattr(socket, "gethostname", lambda: "node-b")  # every step from here on: another node
        other = LocalTarget(RunDir(RUN_ID, staging))
        assert other.wait_ready(config, dep, timeout_s=30).ready
        __import__("os").rename(log_file, log_file + ".elsewhere")  # not on node-b's disk
        text = other.startup_log(dep)  # a copy no older than the question: the ready engine's whole start
        assert "Load weight end" in text and "Uvicorn running on" in text, text[-500:]
        assert other.restart_count(dep) == 0  # asked at the endpoint
        assert other.hardware(config, dep)["node"] == dep.handle["node"] != local.this_node()
        other.teardown(config, ENGINE, run_dir)
        ended = run_dir.read_json(engine_exit_doc(ENGINE))
        assert ended["start_id"] == dep.handle["start_id"] and ended["how"] == "stopped", ended
        assert run_dir.read_bytes(engine_log_doc(ENGINE))
        with pytest.raises(httpx.TransportError):
            httpx.get(dep.base_url + "/health", timeout=2)
    finally:
        monkeypatch.undo()
        deployer.teardown(config, ENGINE, run_dir)


def test_another_node_sees_an_engine_that_died_before_it_was_ready(staging, monkeypatch, tmp_path):
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "node-a"))
    config = parse_run_config({"run_id": RUN_ID, "engines": [
        {"name": ENGINE, "dialect": "sglang", "launcher": "sim", "sim_profile": {"startup_delay_s": 30}}]})
    run_dir = RunDir(RUN_ID, staging)
    engine = config.engine(ENGINE)
    deployer = LocalTarget(run_dir)
    dep = deployer.deploy(config, engine, run_dir, deployer.pin(config, engine))
    try:
        import os
        import signal

        monkeypatch.setattr(socket, "gethostname", lambda: "node-b")
        os.kill(_engine_pid(dep.handle["pid"]), signal.SIGKILL)  # the engine, not its keeper
        with pytest.raises(DeployError, match=r"exited before it was ready \(it exited with code -9\)"):
            LocalTarget(RunDir(RUN_ID, staging)).wait_ready(config, dep, timeout_s=20)
    finally:
        monkeypatch.undo()
        deployer.teardown(config, ENGINE, run_dir)


def _engine_pid(keeper: int) -> int:
    children = _poll(lambda: open(f"/proc/{keeper}/task/{keeper}/children").read().split() or None)
    return int(children[0])


def _poll(check):
    from tasks.core.polling import poll

    return poll(check, timeout_s=15, interval_s=0.2)
