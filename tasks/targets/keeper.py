"""A local engine's keeper: the engine's parent, so that the run state tells every node what only the
engine's own node can see.

The local target starts `python -m tasks.targets.keeper` in a session of its own and hands it down a
pipe (S3 credentials never on a command line nor in the engine's environment) the run's storage, the
engine's name, the id of this start and its command. Every CHECK_EVERY_S it reads the orders other nodes
left (`keeper_orders_doc`), copies the log's tail into the run state when it grew or a fresh copy is
asked for (`engine_log_doc`, `engine_log_copied_doc`, `fresh_log`), stops the engine on an order naming
this start, and once the engine ended records how (`engine_exit_doc`, after the log's last copy) and
ends its process group, itself included; a SIGTERM to the group (tasks/core/processes.py stop_group) too.
"""

from __future__ import annotations

import copy
import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from tasks.core.polling import TimedOut, poll
from tasks.core.processes import start_group
from tasks.state.storage import RunDir
from tasks.state.documents import engine_exit_doc, engine_log_copied_doc, engine_log_doc, keeper_orders_doc
from tasks.state.object_store import S3Store

CHECK_EVERY_S = 0.5
LOG_TAIL_BYTES = 2_000_000  # what the startup findings read of a log
STOP_GRACE_S = 10.0
FRESH_LOG_WAIT_S = 10.0  # a keeper answers an order within CHECK_EVERY_S and two store writes


@dataclass(frozen=True)
class Kept:
    """What the keeper is handed: where the run keeps its state, and what to start."""

    run_dir: RunDir
    engine: str
    start_id: str  # an order or an exit record of an earlier start is not this one's
    argv: list[str]
    log_path: str


def start_kept(run_dir: RunDir, engine: str, start_id: str, argv: list[str], env: dict[str, str], log_path: Path,
               cwd: Path) -> subprocess.Popen:
    """Start the engine under its keeper, in a process group of their own; the keeper's Popen."""
    portable = copy.copy(run_dir)
    if isinstance(run_dir.store, S3Store):  # a store without its client, which does not pickle
        portable.store = S3Store(*run_dir.store.spec())
    proc = start_group([sys.executable, "-m", "tasks.targets.keeper"], log_path, env, cwd=cwd, stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(pickle.dumps(Kept(portable, engine, start_id, list(argv), str(log_path))))
    proc.stdin.close()
    return proc


# ---- what another node reads and asks, through the run state ------------------------------------


def exit_record(run_dir: RunDir, engine: str, start_id: str) -> dict[str, Any] | None:
    """How this start of the engine ended, as its keeper recorded it; None while it runs."""
    doc = run_dir.read_json(engine_exit_doc(engine))
    return doc if doc and doc.get("start_id") == start_id else None


def _order(run_dir: RunDir, engine: str, start_id: str, **order: Any) -> None:
    doc = run_dir.read_json(keeper_orders_doc(engine)) or {}
    kept = doc if doc.get("start_id") == start_id else {"start_id": start_id}
    run_dir.write_json(keeper_orders_doc(engine), {**kept, **order})


def request_stop(run_dir: RunDir, engine: str, start_id: str) -> None:
    _order(run_dir, engine, start_id, stop=True)


def fresh_log(run_dir: RunDir, engine: str, start_id: str) -> str:
    """The engine's log as its keeper copied it after this call began (or at its exit)."""
    asked_at = time.time()
    _order(run_dir, engine, start_id, log_wanted_at=asked_at)

    def copied() -> bool | None:
        note = run_dir.read_json(engine_log_copied_doc(engine)) or {}
        fresh = note.get("start_id") == start_id and note.get("copied_at", 0) >= asked_at
        return True if fresh or exit_record(run_dir, engine, start_id) else None

    try:
        poll(copied, timeout_s=FRESH_LOG_WAIT_S, interval_s=0.2)
    except TimedOut:
        raise RuntimeError(f"engine {engine}: its keeper did not copy its log into "
                           f"{run_dir.where(engine_log_doc(engine))} within {FRESH_LOG_WAIT_S:.0f} s") from None
    return (run_dir.read_bytes(engine_log_doc(engine)) or b"").decode("utf-8", errors="replace")


# ---- the keeper ------------------------------------------------------------------------------------


def _copy_log(kept: Kept, log: BinaryIO, last_size: int, wanted: bool) -> int:
    """Copy the log's tail into the run state when it grew or a copy was ordered; the size copied. Read
    through the keeper's own handle: a log moved or rotated on disk is still the one copied."""
    at = time.time()
    size = os.fstat(log.fileno()).st_size
    if size != last_size or wanted:
        log.seek(max(0, size - LOG_TAIL_BYTES))
        kept.run_dir.write_bytes(engine_log_doc(kept.engine), log.read(size))
        kept.run_dir.write_json(engine_log_copied_doc(kept.engine), {"start_id": kept.start_id, "copied_at": at})
    return size


def main() -> None:
    kept: Kept = pickle.load(sys.stdin.buffer)
    terminated: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: terminated.append(signum))
    with open(kept.log_path, "ab") as out:
        engine = subprocess.Popen(kept.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log = open(kept.log_path, "rb")
    size, answered, how = -1, 0.0, "exited"
    while engine.poll() is None:
        try:
            orders = kept.run_dir.read_json(keeper_orders_doc(kept.engine)) or {}
            mine = orders.get("start_id") == kept.start_id
            wanted = mine and orders.get("log_wanted_at", 0) > answered
            if wanted:
                answered = orders["log_wanted_at"]
            size = _copy_log(kept, log, size, wanted)
            if terminated or (mine and orders.get("stop")):
                how = "stopped"
                break
        except Exception as exc:  # a store that fails now and then must not end the engine
            print(f"keeper: run state unreachable: {exc!r}", file=sys.stderr, flush=True)
        time.sleep(CHECK_EVERY_S)
    if engine.poll() is None:
        engine.terminate()
        try:
            engine.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            engine.kill()
            engine.wait()
    try:
        _copy_log(kept, log, -1, True)
        kept.run_dir.write_json(engine_exit_doc(kept.engine), {"start_id": kept.start_id, "how": how,
                                                                "returncode": engine.returncode, "at": time.time()})
    finally:
        os.killpg(0, signal.SIGKILL)  # whatever the engine left in the group, and the keeper


if __name__ == "__main__":
    main()
