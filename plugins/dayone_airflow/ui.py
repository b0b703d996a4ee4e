"""`make ui`: Airflow standalone on http://127.0.0.1:8080 with DayOne's DAGs, and an archive to write to.

Unless the archive connection `dayone_s3` is defined already (AIRFLOW_CONN_DAYONE_S3, a secrets backend,
or `airflow connections add`), starts a local S3 server (SeaweedFS, its data under .dayone/s3, so archived
runs survive a restart) and hands standalone, and so every component it starts, the connection as
AIRFLOW_CONN_DAYONE_S3. Ctrl-C or SIGTERM reach standalone as SIGINT, its clean shutdown; the S3 server
stops once standalone has exited, however it exited.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dayone_airflow.connections import ARCHIVE_CONN_DEFAULT

REPO = Path(__file__).resolve().parents[2]
STATE = REPO / ".dayone"
ARCHIVE_CONN_ENV = f"AIRFLOW_CONN_{ARCHIVE_CONN_DEFAULT.upper()}"
LOCAL_PRESET = "local-sim"  # what runs where `make ui` runs: a laptop, no GPU, no cluster


def executor_slots(cores: int | None = None) -> int:
    """LocalExecutor workers for this machine: Airflow's default (32) idles some 40 processes on two cores.
    Two a core, at least four: a run's engines on one node measure one task at a time, and the run-level
    tasks (plan, validate, archive, report) are short."""
    cores = cores or len(os.sched_getaffinity(0))
    return max(4, 2 * cores)


# Airflow's limits for a stack on a small, busy machine (a laptop running engines; two loaded cores in CI).
BUSY_MACHINE_TIMEOUTS = {
    # A task process parses the DAG before it runs; on a laptop busy with engines that took 18-30 s, past
    # Airflow's 30 s default, and a task that cannot parse its DAG fails before its step records anything.
    "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
    # the DAG processor's own parse of it: a CI run's took 50.1 s, its default's limit, and the DAG never appeared
    "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
    # a task's start through a busy API server: the 5 s default timed out five times, and the try failed unstarted
    "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
}


# Airflow re-parses every DAG file each 30 s, about a CPU-second a parse of a DayOne DAG: an idle stack's largest
# cost. DayOne's code needs a restart anyway (preload.py); what a parse picks up is a Variable the DAGs read (the
# nightly's schedule and config, the form's preset), within this many seconds.
PARSE_INTERVAL_S = 120


def airflow_env(state: Path, port: int = 8080) -> dict[str, str]:
    """Where standalone keeps its state and finds DayOne; its components run `airflow` from PATH."""
    plugins = str(REPO / "plugins")
    return {
        "AIRFLOW__CORE__PARALLELISM": str(executor_slots()),
        "AIRFLOW_HOME": str(state / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": plugins,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        **BUSY_MACHINE_TIMEOUTS,
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": str(PARSE_INTERVAL_S),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        # the workers reach the API server here (Airflow assumes localhost:8080 unless told)
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "DAYONE_WORKDIR": str(state / "runs"),
        "GX_ANALYTICS_ENABLED": os.environ.get("GX_ANALYTICS_ENABLED", "false"),
        "PYTHONPATH": os.pathsep.join(p for p in (plugins, os.environ.get("PYTHONPATH")) if p),
        "PATH": os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", ""))),
    }


def eval_preset_env() -> dict[str, str]:
    """dayone_eval's form shows local-sim (the Variable `dayone_eval_preset` through the environment) unless
    the user set that Variable: in the environment or the metadata DB (a missing DB counts as not set)."""
    from dayone_airflow.params import EVAL_PRESET_VARIABLE  # imports Airflow: after AIRFLOW_HOME is set

    env_name = f"AIRFLOW_VAR_{EVAL_PRESET_VARIABLE.upper()}"
    if os.environ.get(env_name):
        return {}
    try:  # the metadata DB alone: Variable.get would log a traceback for a DB not yet migrated
        from airflow.secrets.metastore import MetastoreBackend

        if MetastoreBackend().get_variable(EVAL_PRESET_VARIABLE):
            return {}
    except Exception:  # noqa: BLE001  (no DB yet: a first start)
        pass
    return {env_name: LOCAL_PRESET}


def archive_connection_defined() -> bool:
    """Whether `dayone_s3` is defined already: in the environment, a secrets backend or the metadata DB
    (a missing or unmigrated DB counts as not defined)."""
    if os.environ.get(ARCHIVE_CONN_ENV):
        return True
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    try:
        Connection.get_connection_from_secrets(ARCHIVE_CONN_DEFAULT)
    except AirflowNotFoundException:
        return False
    return True


@contextmanager
def local_archive(state: Path) -> Iterator[object | None]:
    """The local S3 server, with AIRFLOW_CONN_DAYONE_S3 pointing at it in this process's environment
    (children inherit it); None, and nothing started, when the user defined `dayone_s3` themselves.

    The connection lives only in the environment (never in the metadata DB): the server's ports change
    at each start, and a connection the user adds later is not mistaken for ours.
    """
    if archive_connection_defined():
        yield None
        return
    from tasks.state.local_s3 import SeaweedS3

    s3 = SeaweedS3(state / "s3")
    try:
        s3.start()
        os.environ[ARCHIVE_CONN_ENV] = s3.connection_uri()
        yield s3
    finally:
        os.environ.pop(ARCHIVE_CONN_ENV, None)
        s3.stop()


def run_until_exit(argv: list[str]) -> int:
    """Run `argv` until it exits; SIGINT or SIGTERM here reach it as one SIGINT, standalone's only clean
    shutdown. Its exit status, 128+N for signal N.

    It runs in its own process group, out of reach of the terminal's Ctrl-C: standalone stops its
    components with SIGTERM, and a scheduler that also got the terminal's SIGINT hangs in its shutdown.
    """
    child = subprocess.Popen(argv, process_group=0)

    def shut_down(signum: int, frame: object) -> None:
        child.send_signal(signal.SIGINT)  # a no-op once it has exited

    previous = {sig: signal.signal(sig, shut_down) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    try:  # a standalone that died leaves its components running (they would hold the port): end them
        os.killpg(child.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    return 128 - code if code < 0 else code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--command", default=f"{shlex.quote(sys.executable)} -m dayone_airflow.standalone",
                        help="what to run beside the S3 server (default: airflow standalone, loopback only)")
    parser.add_argument("--state", type=Path, default=STATE, help="Airflow home, runs and S3 data go under it")
    parser.add_argument("--port", type=int, default=8080, help="the Airflow UI and API port on 127.0.0.1")
    args = parser.parse_args(argv)
    # Until standalone runs, both unwind as Ctrl-C does. Installed even where SIGINT came ignored (started
    # in the background): an ignored SIGINT is inherited, and standalone would never shut down.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    os.environ.update(airflow_env(args.state.resolve(), args.port))
    os.environ.update(eval_preset_env())  # after AIRFLOW_HOME: the Variable is looked up in this stack's DB

    with local_archive(args.state.resolve()) as s3:
        if s3 is None:
            print(f"DayOne: {ARCHIVE_CONN_DEFAULT} is defined already: archiving there, no local S3 started",
                  flush=True)
        else:
            print(f"DayOne: local S3 (SeaweedFS) on {s3.endpoint_url}, data in {s3.data_dir}; connection "
                  f"{ARCHIVE_CONN_DEFAULT} = {ARCHIVE_CONN_ENV} for every Airflow component", flush=True)
        return run_until_exit(shlex.split(args.command))


if __name__ == "__main__":
    sys.exit(main())
