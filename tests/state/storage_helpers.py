"""Helpers of the storage tests: a worker with nothing on its disk, and what it left there."""

from __future__ import annotations

import os
from pathlib import Path


def fresh_worker_env(base: Path, extra: dict[str, str]) -> dict[str, str]:
    """A worker with nothing on its disk: its own empty DAYONE_WORKDIR and HOME (and caches under it)."""
    work, home = base / "work", base / "home"
    work.mkdir(parents=True)
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DAYONE_STAGING", "XDG_CACHE_HOME", "MPLCONFIGDIR")}
    return {**env, **extra, "DAYONE_WORKDIR": str(work), "HOME": str(home), "MPLCONFIGDIR": str(home / "mpl")}


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
