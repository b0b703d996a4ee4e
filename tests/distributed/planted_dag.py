"""The file audit's own test (test_celery_workers.py): a planted cross-worker read, in a DAG of its own.

`write` leaves a file on the disk of the worker that runs it and hands its path on; `read` opens that path.
Each has a queue of its own, so the test puts them on the workers it names.
Run on two workers, the read works here, where every node's disk is visible to the others as a shared
disk would be, and would find nothing on a host of its own: the audit must name it.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pendulum
from airflow.sdk import dag, task


@dag(dag_id="planted_cross_worker_read", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
     catchup=False, tags=["test"])
def planted_cross_worker_read():
    @task(queue="planted-write")
    def write() -> str:
        path = Path(os.environ["DAYONE_WORKDIR"]) / "planted.txt"
        path.write_text(f"written on {socket.gethostname()}\n")
        return str(path)

    @task(queue="planted-read")
    def read(path: str) -> str:
        return Path(path).read_text()

    read(write())


planted_cross_worker_read()
