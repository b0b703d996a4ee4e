"""Progress for long runs: a tqdm bar on a terminal, periodic log lines elsewhere (Airflow logs)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

log = logging.getLogger("dayone.load")


class Progress:
    def __init__(self, total: int, label: str, log_every_s: float = 30.0, stream: Any = None):
        self.total, self.label, self.log_every_s = total, label, log_every_s
        self.done = self.failed = 0
        self._stream = stream or sys.stderr
        self._bar = None
        self._last_log = time.monotonic()
        if getattr(self._stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=label, unit="req", file=self._stream, leave=False)

    def advance(self, ok: bool, detail: str = "") -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        if self._bar is not None:
            self._bar.update(1)
            if detail:
                self._bar.set_postfix_str(detail, refresh=False)
            return
        now = time.monotonic()
        if now - self._last_log >= self.log_every_s:
            self._last_log = now
            log.info("%s: %d/%d requests done, %d failed %s", self.label, self.done, self.total, self.failed, detail)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        log.info("%s: %d/%d requests done, %d failed", self.label, self.done, self.total, self.failed)
