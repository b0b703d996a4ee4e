"""Restart on crash: a supervisor process that respawns the server when it exits abnormally.

The server is a child process on the same port; each respawn gets the restart count, which its
/sim/state reports, as a container's restart count would be. A clean exit (code 0) or a signal
to the supervisor ends both.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from types import FrameType


def _log(line: str) -> None:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {line}", flush=True)


def supervise(argv: list[str], backoff_s: float = 0.2) -> int:
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.terminate()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    restarts = 0
    delay = backoff_s
    while True:
        started = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", "tasks.sim", *argv, "--child", "--restarts", str(restarts)])
        code = child.wait()
        if stopping or code == 0:
            return 0
        restarts += 1
        # A server that dies right after starting (a bad port, say) must not spin: back off like kubelet.
        delay = min(delay * 2, 5.0) if time.monotonic() - started < 2.0 else backoff_s
        _log(f"WARNING sim supervisor: server exited with code {code}; restarting it (restart {restarts})")
        time.sleep(delay)
