"""A stand-in `nvidia-smi` for a simulated engine's pod: it answers from the simulator's GPUs, as the
real one answers from the driver, in nvidia-smi's own formats, so the engine pod's wrapper
(tasks/telemetry/hardware.py gpu_report_script) runs unchanged on a simulated cluster.

The cards are the profile's (DAYONE_SIM_PROFILE, a JSON file: the UUIDs, product and total the simulator's
tasks/sim/gpus.py gives them). Their used memory is the simulator's DCGM-style exporter's (DAYONE_SIM_URL +
/dcgm/metrics: weights + KV in use), whose values are those of its last refresh (the profile's
gpus.exporter_refresh_s; a short one makes them nvidia-smi's live view); before the simulated engine serves
(the wrapper's first report runs before it starts) a card holds nothing yet: 0 MiB used, as a real card
before its engine loads. Answers `--query-gpu=<fields> --format=csv,noheader,nounits` for index, uuid,
name, memory.used, memory.total, memory.free and driver_version (one row per card, ", " between fields,
MiB as whole numbers), and the bare command's header (the CUDA version line). Without a profile it fails
as nvidia-smi does without a driver (exit 9, its message).

`write_stand_in(directory, sim_url, profile)` puts an executable `nvidia-smi` there, for a pod's PATH.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import urllib.request
from pathlib import Path
from typing import Any

from tasks.core.dcgm import FB_FREE, FB_USED, SIMULATOR_PATH

SIM_URL_ENV = "DAYONE_SIM_URL"
SIM_PROFILE_ENV = "DAYONE_SIM_PROFILE"
DRIVER_VERSION = "570.133.20"
CUDA_VERSION = "12.8"
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
             "latest NVIDIA driver is installed and running.")
_SAMPLE = re.compile(r"^(?P<name>\w+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _cards(profile_path: str, url: str | None) -> list[dict[str, str | float]]:
    try:
        with urllib.request.urlopen(url.rstrip("/") + SIMULATOR_PATH, timeout=5) as answer:  # type: ignore[union-attr]
            text = answer.read().decode()
    except (OSError, AttributeError):
        return _unloaded(profile_path)  # the simulated engine is not serving (yet): nothing allocated on its cards
    cards: dict[int, dict[str, str | float]] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m["name"] in (FB_USED, FB_FREE):
            labels = dict(_LABEL.findall(m["labels"]))
            card = cards.setdefault(int(labels["gpu"]), {"index": labels["gpu"], "uuid": labels["UUID"],
                                                           "name": labels.get("modelName", "")})
            card[m["name"]] = float(m["value"])
    return [cards[i] for i in sorted(cards)]


def _unloaded(profile_path: str) -> list[dict[str, str | float]]:
    """The profile's cards with nothing on them (loaded only here: the validation costs a second on a busy core)."""
    from tasks.config.sim_profile import validate_profile
    from tasks.sim.gpus import SimGpus

    gpus = SimGpus(validate_profile(json.loads(Path(profile_path).read_text(encoding="utf-8"))))
    return [{"index": str(i), "uuid": u, "name": gpus.spec.product, FB_USED: 0.0, FB_FREE: gpus.spec.memory_total_mib}
            for i, u in enumerate(gpus.uuids)]


def _field(card: dict[str, str | float], name: str) -> str:
    used, free = float(card[FB_USED]), float(card[FB_FREE])
    values = {"index": card["index"], "uuid": card["uuid"], "name": card["name"], "driver_version": DRIVER_VERSION,
              "memory.used": f"{used:.0f}", "memory.free": f"{free:.0f}", "memory.total": f"{used + free:.0f}"}
    if name not in values:
        raise KeyError(name)
    return str(values[name])


def main(argv: list[str]) -> int:
    profile = os.environ.get(SIM_PROFILE_ENV)
    try:
        if not profile:
            raise OSError(f"{SIM_PROFILE_ENV} is not set")
        cards = _cards(profile, os.environ.get(SIM_URL_ENV))
    except (OSError, ValueError):
        print(NO_DRIVER)
        return 9
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if query is None:
        print(f"| NVIDIA-SMI {DRIVER_VERSION}    Driver Version: {DRIVER_VERSION}    CUDA Version: {CUDA_VERSION}     |")
        for card in cards:
            print(f"|   {card['index']}  {card['name']}  {_field(card, 'memory.used')}MiB / "
                  f"{_field(card, 'memory.total')}MiB |")
        return 0
    fields = [f.strip() for f in query.split(",")]
    try:
        rows = [", ".join(_field(card, f) for f in fields) for card in cards]
    except KeyError as exc:
        print(f'Field "{exc.args[0]}" is not a valid field to query.')
        return 2
    print("\n".join(rows))
    return 0


def write_stand_in(directory: Path, sim_url: str, profile: dict[str, Any], python: str = sys.executable) -> Path:
    """An executable `nvidia-smi` in `directory` that answers for the simulator at `sim_url` run with `profile`."""
    directory.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[2]
    profile_path = directory / "sim-profile.json"
    profile_path.write_text(json.dumps(profile), encoding="utf-8")
    path = directory / "nvidia-smi"
    path.write_text(f'#!/bin/sh\n{SIM_URL_ENV}="{sim_url}" {SIM_PROFILE_ENV}="{profile_path}" PYTHONPATH="{root}" '
                    f'exec "{python}" -m tasks.sim.nvidia_smi "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
