"""`make demo`: run dayone_eval end to end through Airflow on this machine.

Starts a local S3 server (SeaweedFS) on loopback, points the `dayone_s3` connection at it, runs the
DAG with `dag.test()` on SQLite (the engines are started by the DAG's own deploy step), stops what
it started, and prints where the report and the archived run are.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STATE = REPO / ".dayone"


def _airflow_env() -> None:
    os.environ.setdefault("AIRFLOW_HOME", str(STATE / "airflow"))
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
    os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ.setdefault("DAYONE_WORKDIR", str(STATE / "runs"))
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "tasks" / "config" / "presets" / "llamacpp-ab.yaml"), help="run config (YAML)")
    parser.add_argument("--keep-s3", action="store_true", help="leave the S3 server running to browse the run")
    args = parser.parse_args(argv)
    _airflow_env()

    import yaml

    from tasks.config import parse_run_config
    from tasks.state.local_s3 import SeaweedS3

    conf = yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}
    parse_run_config(conf)  # bad input fails here, before anything starts
    started, started_wall = time.monotonic(), time.time()
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    s3 = SeaweedS3(STATE / "s3")
    s3.start()
    os.environ["AIRFLOW_CONN_DAYONE_S3"] = s3.connection_uri()
    try:
        from airflow.dag_processing.dagbag import DagBag

        from dayone_airflow.glue import dayone_run_id

        bag = DagBag(dag_folder=str(REPO / "dags"))
        if bag.import_errors:
            raise SystemExit(f"DAG import errors: {bag.import_errors}")
        dag = bag.get_dag("dayone_eval")
        run = dag.test(run_conf=conf)
        from tasks.state import documents as run_documents
        from tasks.report.schema import read_summary
        from tasks.state.storage import RunDir

        run_dir = RunDir(dayone_run_id(run.run_id))
        archived = run_dir.read_json(run_documents.ARCHIVED) or {}
        summary_doc = run_dir.read_json(run_documents.SUMMARY)
        summary = None if summary_doc is None else read_summary(summary_doc)
        print()
        print(f"DayOne demo: run {run_dir.run_id} finished {run.state} in {time.monotonic() - started:.0f} s")
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
        if summary is not None and summary.comparisons:
            print(f"  verdicts ({summary.measurement_design}; {summary.confidence:.0%} intervals):")
            for c in summary.comparisons:
                print(f"    {c.scenario} {c.level} {c.figure}, {c.engine} vs {c.base}: {c.verdict}, {c.interval(covers=True)}")
        return 0 if str(run.state) in ("success", "DagRunState.SUCCESS") else 1
    finally:
        _stop_local_engines(started_wall)  # an interrupted run never reached its teardown tasks
        if not args.keep_s3:
            s3.stop()


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
