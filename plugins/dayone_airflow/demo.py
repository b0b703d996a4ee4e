"""`make demo`: run dayone_eval end to end through Airflow on this machine.

Starts a local S3 server (SeaweedFS) on loopback, points the `dayone_s3` connection at it, runs the
DAG with `dag.test()` on SQLite (the engines are started by the DAG's own deploy step), stops what
it started, and prints where the report and the archived run are.

While it runs, the terminal shows the run's progress (tasks/cli/live.py: a line per step as it ends, the
running steps and their load below them), and everything Airflow and DayOne log goes to demo.log in the
run's directory, named when the run starts and when it ends. A failed run prints each failed task's last
log lines from that file.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tasks.cli.live import LiveView

REPO = Path(__file__).resolve().parents[2]
STATE = REPO / ".dayone"


def _airflow_env() -> None:
    os.environ.setdefault("AIRFLOW_HOME", str(STATE / "airflow"))
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
    os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ.setdefault("DAYONE_WORKDIR", str(STATE / "runs"))
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    # The logs go to a file (LogToFile): plain text, not the terminal's colour codes. Airflow's log setup
    # decides on colour once, before the file takes stdout and stderr over.
    os.environ.setdefault("NO_COLOR", "1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "tasks" / "config" / "presets" / "llamacpp-ab.yaml"), help="run config (YAML)")
    parser.add_argument("--keep-s3", action="store_true", help="leave the S3 server running to browse the run")
    args = parser.parse_args(argv)
    _airflow_env()

    import yaml
    from airflow.models.dagrun import DagRun
    from airflow.sdk import timezone
    from airflow.utils.types import DagRunType

    from tasks.config import parse_run_config
    from tasks.state.local_s3 import SeaweedS3
    from tasks.state.storage import default_root

    from dayone_airflow.glue import dayone_run_id

    conf = yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}
    parse_run_config(conf)  # bad input fails here, before anything starts
    started, started_wall = time.monotonic(), time.time()
    # The run's id is dag.test's own for this moment, known before it starts: the log file lies in its directory.
    when = timezone.coerce_datetime(timezone.utcnow())
    airflow_run_id = DagRun.generate_run_id(run_type=DagRunType.MANUAL, logical_date=when, run_after=when)
    log_path = default_root() / dayone_run_id(airflow_run_id) / DEMO_LOG
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"DayOne demo: run {dayone_run_id(airflow_run_id)} of {Path(args.config).name}; "
          f"Airflow's and DayOne's full log: {log_path}", flush=True)
    try:
        with LogToFile(log_path) as terminal:
            subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
            s3 = SeaweedS3(STATE / "s3")
            s3.start()
            os.environ["AIRFLOW_CONN_DAYONE_S3"] = s3.connection_uri()
            try:
                from airflow.dag_processing.dagbag import DagBag

                bag = DagBag(dag_folder=str(REPO / "dags"))
                if bag.import_errors:
                    raise SystemExit(f"DAG import errors: {bag.import_errors}")
                dag = bag.get_dag("dayone_eval")
                with LiveView(_progress_of(airflow_run_id), terminal.stream):
                    run = dag.test(run_conf=conf, logical_date=when, run_after=when)
                failed = _failed_tasks(run)
            finally:
                _stop_local_engines(started_wall)  # an interrupted run never reached its teardown tasks
                if not args.keep_s3:
                    s3.stop()
        _print_result(run, s3, time.monotonic() - started)
        for task in failed[:FAILED_TASKS_SHOWN]:
            _print_failed_task(task, log_path)
        if len(failed) > FAILED_TASKS_SHOWN:
            print(f"\n... and {len(failed) - FAILED_TASKS_SHOWN} more failed tasks: "
                  + ", ".join(t.name for t in failed[FAILED_TASKS_SHOWN:]))
    finally:
        print(f"DayOne demo: full log in {log_path}")
    return 0 if str(run.state) in ("success", "DagRunState.SUCCESS") else 1


DEMO_LOG = "demo.log"
FAILED_TAIL_LINES = 15
FAILED_TASKS_SHOWN = 3
# dag.test's own log lines around each task it runs (airflow/sdk/definitions/dag.py), and where Airflow's task
# runner starts its bookkeeping after the task's own work (airflow/sdk/execution_time/task_runner.py)
TASK_START = "[DAG TEST] starting task_id={task_id} map_index={map_index}"
TASK_END = "[DAG TEST] end task task_id={task_id} map_index={map_index}"
TASK_DONE = "::group::Post Execute"


class LogToFile:
    """Everything written to this process's stdout and stderr, its children's included, goes to `path`;
    `stream` is the terminal, for the live view. Undone on leaving, whatever happened."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> LogToFile:
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = {fd: os.dup(fd) for fd in (1, 2)}
        self.stream = os.fdopen(os.dup(self._saved[1]), "w", buffering=1, encoding="utf-8", errors="replace")
        with open(self.path, "ab") as log:
            for fd in (1, 2):
                os.dup2(log.fileno(), fd)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)
            os.close(saved)
        self.stream.close()


def _progress_of(airflow_run_id: str):
    """The run's progress documents, where its tasks write them (tasks/state/progress.py)."""
    from tasks.state.progress import read_progress

    from dayone_airflow.glue import run_dir

    state = run_dir(airflow_run_id)
    return lambda: read_progress(state)


@dataclass(frozen=True)
class FailedTask:
    task_id: str
    map_index: int
    name: str  # the task as the UI names it: its engine where it is one of an engine's tasks


def _failed_tasks(run) -> list[FailedTask]:
    from airflow.utils.state import TaskInstanceState

    tis = sorted(run.get_task_instances(state=[TaskInstanceState.FAILED]), key=lambda ti: ti.end_date or ti.start_date)
    return [FailedTask(ti.task_id, ti.map_index, ti.task_id + (f" [{ti.rendered_map_index or ti.map_index}]"
                                                                 if ti.map_index >= 0 else "")) for ti in tis]


def task_log_tail(log_path: Path, task_id: str, map_index: int, lines: int = FAILED_TAIL_LINES) -> list[str]:
    """The last `lines` lines the task's last try wrote to the demo's log (dag.test marks each task's start and
    end), up to Airflow's bookkeeping after it; the log's last lines when the marks are not found."""
    text = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    start_mark, end_mark = (m.format(task_id=task_id, map_index=map_index) for m in (TASK_START, TASK_END))
    starts = [i for i, line in enumerate(text) if start_mark in line]
    if not starts:
        return text[-lines:]
    section = text[starts[-1]:]
    end = next((i for i, line in enumerate(section) if TASK_DONE in line or end_mark in line), len(section))
    return section[:end][-lines:]


def _print_failed_task(task: FailedTask, log_path: Path) -> None:
    print(f"\nFailed task {task.name}: its last log lines ({log_path}):")
    for line in task_log_tail(log_path, task.task_id, task.map_index):
        print(f"  {line}")


def _print_result(run, s3, seconds: float) -> None:
    from tasks.report.schema import read_summary
    from tasks.state import documents as run_documents
    from tasks.state.storage import RunDir

    from dayone_airflow.glue import dayone_run_id

    run_dir = RunDir(dayone_run_id(run.run_id))
    archived = run_dir.read_json(run_documents.ARCHIVED) or {}
    summary_doc = run_dir.read_json(run_documents.SUMMARY)
    summary = None if summary_doc is None else read_summary(summary_doc)
    print()
    print(f"DayOne demo: run {run_dir.run_id} finished {run.state} in {seconds:.0f} s")
    print(f"  report:  {run_dir.path / run_documents.REPORT}")
    print(f"  archive: s3://{archived.get('bucket')} (SeaweedFS data in {s3.data_dir})")
    for engine, prefix in (archived.get("prefixes") or {}).items():
        print(f"    {engine}: {prefix}")
    for key in archived.get("keys", []):
        print(f"      {key}")
    for engine, e in (summary.engines if summary else {}).items():
        passed = sum(v == "pass" for v in e.checks.values())
        cache = e.prefix_cache.verdict if e.prefix_cache else None
        print(f"  {engine}: checks {passed}/{len(e.checks)} pass, needles {e.needles.passed}/"
              f"{e.needles.total}, prefix cache {cache}")
        if e.quality is not None:
            families = e.quality.families.values()
            print(f"    answers {sum(f.correct for f in families)}/{sum(f.items for f in families)} right ("
                  + ", ".join(f"{name} {f.correct}/{f.items}" for name, f in e.quality.families.items()) + ")")
    if summary is not None and summary.comparisons:
        print(f"  verdicts ({summary.measurement_design}; {summary.confidence:.0%} intervals):")
        for c in summary.comparisons:
            print(f"    {c.scenario} {c.level} {c.figure}, {c.engine} vs {c.base}: {c.verdict}, {c.interval(covers=True)}")
    _print_parity(summary)


def _print_parity(summary) -> None:
    """Whether the engines served the same weights, and their answers and log-likelihoods held against each other."""
    if summary is None:
        return
    for pair in summary.same_weights:
        print(f"  weights, {pair.a} vs {pair.b}: {pair.verdict} ({pair.text})")
    parity = summary.parity
    if parity is None:
        return
    for g in parity.agreement:
        print(f"  greedy agreement, {g.a} vs {g.b}: {g.identical}/{g.items} answers identical")
    for f in parity.answers:
        print(f"  answer parity {f.family}, {f.a} vs {f.b}: {f.verdict} ({f.both_right} both right of {f.items})")
    for finding in parity.nll_findings:
        print(f"  log-likelihood, {finding.engine} at {finding.length_tokens} tokens: {finding.text}")
    for why in parity.not_compared:
        print(f"  not compared: {why}")


def _stop_local_engines(since: float) -> None:
    """Stop the local engines of the runs this demo started (a no-op after their teardown)."""
    from tasks.state.storage import RunDir, default_root
    from tasks.state.documents import DEPLOYMENTS_DIR
    from tasks.targets.local import LocalTarget

    root = default_root()
    for run in root.iterdir() if root.is_dir() else ():
        if run.is_dir() and run.stat().st_mtime >= since:
            run_dir = RunDir(run.name, root)
            for doc in run_dir.names(DEPLOYMENTS_DIR):
                LocalTarget().teardown(None, doc.removesuffix(".json"), run_dir)


if __name__ == "__main__":
    sys.exit(main())
