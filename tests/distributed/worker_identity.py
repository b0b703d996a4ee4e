"""The host name a Celery worker of the distributed stack reports (its `[core] hostname_callable`).

Both workers run on this machine; in a real deployment each is a host or pod of its own. Each worker is
told its name in DAYONE_STACK_HOSTNAME, so a task instance's `hostname` says which worker ran it.
"""

from __future__ import annotations

import os


def hostname() -> str:
    return os.environ["DAYONE_STACK_HOSTNAME"]
