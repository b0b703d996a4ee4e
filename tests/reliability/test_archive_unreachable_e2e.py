"""A run that archives nothing is a failed run, whatever its engines did.

- The archive fails all of its tries, its S3 endpoint down or its connection gone after the plan:
  every engine step succeeds, and the run ends failed with the reason in `conclude`'s log (before, a
  connection that could not be read failed the task without recording the step, and the run ended green).
- No archive connection at all: the plan fails at once, naming the connection and how to add one,
  and nothing is deployed (before, the run measured for minutes and only then failed to archive).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import socket

import pytest
from rel_helpers import run_eval

CONF = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 4096},
    "engines": [{"name": "measured", "dialect": "sglang", "sim_profile": {"ttft_base_s": 0.002, "itl_s": 0.002}}],
    "scenarios": {
        "functional": {"enabled": False},
        "warmup": False,
        "short": {"concurrency": [1], "rounds": 1, "requests_per_round": 4, "input_tokens": 32, "output_tokens": 8},
        "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
        "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
    },
    "archive": {"bucket": "dayone-unreachable"},
    "request_timeout_s": 30,
}


@pytest.fixture(autouse=True)
def no_wait_between_tries(eval_dag, monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow waits 10 s between the archive's (and the report's) four tries; no try can pass here, so the
    waits are idle time. The tries themselves still happen."""
    for task_id in ("archive", "report"):
        monkeypatch.setattr(eval_dag.get_task(task_id), "retry_delay", dt.timedelta(0))


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_attempt_per_try(mp: pytest.MonkeyPatch) -> None:
    """The archive waits out a transient outage for two minutes per try (an outage test covers that);
    Airflow's four tries are what this test is about, so each try gives up at once."""
    from tenacity import stop_after_attempt

    import tasks.publish.archive

    mp.setattr(tasks.publish.archive.ensure_bucket.retry, "stop", stop_after_attempt(1))


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name} {record.getMessage()}")


def _states(run) -> dict[str, str]:
    return {ti.task_id: str(ti.state).rsplit(".", 1)[-1].lower() for ti in run.run.get_task_instances()
            if ti.map_index <= 0}


@pytest.fixture()
def conclude_log():
    records = Records()
    logging.getLogger("dayone.airflow").addHandler(records)
    yield records.lines
    logging.getLogger("dayone.airflow").removeHandler(records)


def _connection_gone_after_the_plan(mp: pytest.MonkeyPatch) -> None:
    """The connection existed at plan and is gone when the archive asks for it (deleted mid-run, or
    a secrets backend that stopped answering): the Airflow UI run of the report, which ended green."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    import dayone_airflow.connections

    real, calls = dayone_airflow.connections.s3_client, []

    def gone(config):
        calls.append(config)
        if len(calls) == 1:  # the plan's check: the connection is still there
            return real(config)
        raise AirflowNotFoundException("The conn_id `dayone_s3` isn't defined")

    mp.setattr(dayone_airflow.connections, "s3_client", gone)


# (how the archive fails, its recorded detail, the exception conclude names)
ARCHIVE_FAILURES = [
    ("endpoint_down", _one_attempt_per_try, "Could not connect", "EndpointConnectionError"),
    ("connection_gone", _connection_gone_after_the_plan, "isn't defined", "AirflowNotFoundException"),
]


@pytest.mark.parametrize("setup,detail,exception", [f[1:] for f in ARCHIVE_FAILURES],
                         ids=[f[0] for f in ARCHIVE_FAILURES])
def test_a_run_whose_archive_fails_ends_failed_with_the_reason_in_conclude(eval_dag, tmp_path, conclude_log,
                                                                           setup, detail, exception):
    dead = json.dumps({"conn_type": "aws", "login": "dayone-local", "password": "dayone-local-secret",
                       "extra": {"endpoint_url": f"http://127.0.0.1:{_closed_port()}", "region_name": "us-east-1"}})
    run = run_eval(eval_dag, CONF, tmp_path / "runs", {"AIRFLOW_CONN_DAYONE_S3": dead}, setup=setup)
    states = _states(run)
    # every engine step ran and succeeded: only the archive went wrong
    assert all(states[t] == "success" for t in states if t.startswith("engines.")), states
    assert [r["status"] for r in run.rows("requests", "measured")] == ["ok"] * 4
    assert states["archive"] == "failed" and states["report"] == "upstream_failed", states
    archive = run.outcome("archive")
    assert archive.get("status") == "failed" and detail in archive["detail"], archive
    assert states["conclude"] == "failed", states
    assert str(run.run.state).endswith("failed"), run.run.state
    reasons = [line for line in conclude_log if line.startswith("dayone.airflow run ")]
    assert any(f"run/archive: {exception}" in r for r in reasons), reasons
    assert any("run/report: never ran" in r for r in reasons), reasons
    assert any("nothing of this run was archived" in r for r in reasons), reasons


def test_without_an_archive_connection_the_plan_fails_at_once_and_nothing_is_deployed(eval_dag, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_DAYONE_S3", raising=False)
    run = run_eval(eval_dag, CONF, tmp_path / "runs", {})
    assert str(run.run.state).endswith("failed"), run.run.state
    plan = run.outcome("plan")
    assert plan["status"] == "failed", plan
    for words in ("'dayone_s3' is not defined", "nothing this run measures could be archived",
                  "airflow connections add dayone_s3", "README"):
        assert words in plan["detail"], (words, plan["detail"])
    assert not list((tmp_path / "runs").glob("*/deployments/*.json")), "an engine was deployed without an archive"
    assert _states(run)["conclude"] == "failed"
