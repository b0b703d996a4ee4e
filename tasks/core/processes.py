"""Detached process groups: how DayOne starts and stops every local server (engines, the
simulator, the local S3 server).

A server starts in its own session, so it outlives the task that started it and a stop reaches
everything it spawned (a supervisor and its server, llama.cpp's threads): SIGTERM to the group,
SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from tasks.core.polling import TimedOut, poll


def start_group(argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None, cwd: Path | None = None,
                preexec_fn: Callable[[], None] | None = None, stdin: int = subprocess.DEVNULL) -> subprocess.Popen:
    """Start `argv` in a new session, stdout and stderr appended to `log_path` (stdin=PIPE: a pipe to
    hand it what must stay off its command line)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=stdin,
            env={**os.environ, **(env or {})}, cwd=str(cwd) if cwd else None,
            start_new_session=True, preexec_fn=preexec_fn,
        )


def alive(pid: int) -> bool:
    """Whether the process exists and has not exited (a zombie child of ours has exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours has exited: look without reaping, so its Popen still gets the exit code
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return True  # not our child: it exists


def stop_group(pid: int, grace_s: float = 10.0) -> int | None:
    """SIGTERM the process group led by `pid`, SIGKILL it after `grace_s`; safe when already gone.

    A child of ours is reaped (no zombie outlives a teardown) and its exit code returned
    (negative: the signal that ended it); None for a process that is not our child.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        try:
            poll(lambda: True if not alive(pid) else None, timeout_s=grace_s, interval_s=0.1)
            break
        except TimedOut:
            continue
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if reaped else None
