"""`make demo`'s log file (plugins/dayone_airflow/demo.py): everything the process and its children write goes
to the file, the terminal keeps the live view, and a failed task's last lines are found in the file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("airflow")

from dayone_airflow.demo import task_log_tail  # noqa: E402

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"

# As dag.test writes them (airflow/sdk/definitions/dag.py), with a retry of the failed task.
DEMO_LOG = textwrap.dedent("""\
    2026-12-06T18:45:15Z [info ] [DAG TEST] starting task_id=plan map_index=-1 [airflow.sdk.definitions.dag]
    2026-12-06T18:45:16Z [info ] step plan done: {} [dayone.steps]
    2026-12-06T18:45:16Z [info ] [DAG TEST] end task task_id=plan map_index=-1 [airflow.sdk.definitions.dag]
    2026-12-06T18:45:17Z [info ] [DAG TEST] starting task_id=engines.deploy map_index=1 [airflow.sdk.definitions.dag]
    2026-12-06T18:45:17Z [error] first try: llama-server exited with 1 [dayone.steps]
    2026-12-06T18:45:17Z [info ] [DAG TEST] end task task_id=engines.deploy map_index=1 [airflow.sdk.definitions.dag]
    2026-12-06T18:45:18Z [info ] [DAG TEST] starting task_id=engines.deploy map_index=0 [airflow.sdk.definitions.dag]
    2026-12-06T18:45:19Z [info ] step llamacpp/deploy done [dayone.steps]
    2026-12-06T18:45:19Z [info ] [DAG TEST] end task task_id=engines.deploy map_index=0 [airflow.sdk.definitions.dag]
    2026-12-06T18:45:28Z [info ] [DAG TEST] starting task_id=engines.deploy map_index=1 [airflow.sdk.definitions.dag]
    2026-12-06T18:45:28Z [error] last try: llama-server exited with 1: error loading model [dayone.steps]
    2026-12-06T18:45:28Z [error] Task failed with exception [task]
    2026-12-06T18:45:28Z [info ] ::group::Post Execute [task]
    2026-12-06T18:45:28Z [info ] Task instance state updated [airflow.api_fastapi.execution_api.routes.task_instances]
    2026-12-06T18:45:28Z [info ] [DAG TEST] end task task_id=engines.deploy map_index=1 [airflow.sdk.definitions.dag]
    2026-12-06T18:45:29Z [info ] [DAG TEST] starting task_id=engines.wait_ready map_index=0 [airflow.sdk.definitions.dag]
    2026-12-06T18:45:30Z [info ] step llamacpp/wait_ready done [dayone.steps]
    """)


def test_a_failed_task_tail_is_its_last_try_section_of_the_log(tmp_path):
    log = tmp_path / "demo.log"
    log.write_text(DEMO_LOG)
    tail = task_log_tail(log, "engines.deploy", 1)
    assert tail[0].endswith("[DAG TEST] starting task_id=engines.deploy map_index=1 [airflow.sdk.definitions.dag]")
    assert "last try: llama-server exited with 1: error loading model" in tail[1]
    assert tail[-1].endswith("Task failed with exception [task]"), "the task's own lines, not Airflow's after them"
    assert "first try" not in "\n".join(tail) and "wait_ready" not in "\n".join(tail)
    assert len(task_log_tail(log, "engines.deploy", 1, lines=2)) == 2
    assert task_log_tail(log, "conclude", -1, lines=3) == DEMO_LOG.splitlines()[-3:], "no marks: the log's end"


def test_the_log_file_gets_no_colour_codes(tmp_path):
    """Airflow's log records, set up as `make demo` sets Airflow up, then written into the file."""
    log = tmp_path / "demo.log"
    script = textwrap.dedent(f"""
        import logging
        from dayone_airflow import demo
        demo._airflow_env()
        from airflow._shared.logging.structlog import configure_logging
        with demo.LogToFile(__import__("pathlib").Path({str(log)!r})):
            configure_logging(log_level="INFO")
            logging.getLogger("dayone.steps").info("step plan done")
        """)
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**env, "PYTHONPATH": str(PLUGINS), "FORCE_COLOR": "1", "AIRFLOW_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    written = log.read_text()
    assert "step plan done" in written and "\x1b[" not in written, written


def test_the_process_and_its_children_write_to_the_file_and_the_view_to_the_terminal(tmp_path):
    """In a process of its own, so that pytest's capture of this one's stdout is left alone."""
    log = tmp_path / "demo.log"
    script = textwrap.dedent(f"""
        import logging, subprocess, sys
        from dayone_airflow.demo import LogToFile
        with LogToFile(__import__("pathlib").Path({str(log)!r})) as terminal:
            print("airflow says a lot")
            logging.basicConfig(level=logging.INFO)
            logging.getLogger("dayone.steps").info("step plan done")
            subprocess.run([sys.executable, "-c", "import sys; print('engine child'); print('child err', file=sys.stderr)"])
            terminal.stream.write("live view line\\n")
        print("result block")
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(PLUGINS)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "live view line\nresult block\n"
    assert done.stderr == ""
    written = log.read_text()
    for line in ("airflow says a lot", "INFO:dayone.steps:step plan done", "engine child", "child err"):
        assert line in written
    assert "live view line" not in written and "result block" not in written
