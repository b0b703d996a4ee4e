"""The CPU the suite's real components need, each alone on an idle machine, against `make test`'s budget.

`make test` within T minutes on N cores can spend at most N x T x 60 CPU-seconds, with every core busy
throughout. Each unit below drives a real system the project requires (the Airflow stacks of `make ui`
and of a Celery deployment, OpenWebUI, llama.cpp's server, runner pods through the fake Kubernetes, the
OCI registry) and runs here alone, one after another, so no unit pays for another's load. A unit's cost
is the machine's busy CPU while it runs (/proc/stat: user, nice, system, irq, softirq), which also holds
the servers it starts in sessions of their own; the idle machine's own rate, measured before, is taken
off. Figures: wall and CPU-seconds per unit, their sum, and the sum as a share of the budget. About 15
minutes on two cores; it needs what the tests need (`make venv-test system-packages openwebui-venv`).

    python bench/suite_floor.py [--minutes 12] [UNIT ...]   (units: test files or directories)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UNITS = (
    "tests/ui/test_ui_newcomer.py",
    "tests/distributed",
    "tests/test_e2e_openwebui.py",
    "tests/independent/test_openwebui_plain.py",
    "tests/openwebui",
    "tests/k8s/test_k8s_openwebui.py",
    "tests/realengine",
    "tests/k8s/test_k8s_runner_pods_pipeline.py",
    "tests/registry/test_pinning.py",
    "tests/test_ui_stack.py",
)
IDLE_PROBE_S = 10


def busy_cpu_s() -> float:
    """The machine's busy CPU-seconds since boot: user, nice, system, irq, softirq (not idle, iowait, steal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def idle_rate() -> float:
    """Busy CPU-seconds a second with nothing of ours running (the VM's own housekeeping)."""
    start = busy_cpu_s()
    time.sleep(IDLE_PROBE_S)
    return (busy_cpu_s() - start) / IDLE_PROBE_S


def run_unit(unit: str, background: float) -> tuple[float, float, str]:
    cpu0, t0 = busy_cpu_s(), time.monotonic()
    # CI=true: a unit whose component is missing fails (tests/conftest.py) instead of skipping at no cost
    done = subprocess.run([sys.executable, "-m", "pytest", unit, "-q", "-p", "no:cacheprovider"], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "CI": "true"})
    wall = time.monotonic() - t0
    cpu = busy_cpu_s() - cpu0 - background * wall
    tail = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    return wall, cpu, tail if done.returncode == 0 else f"FAILED (rc {done.returncode}): {tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=12.0, help="the suite's target wall time")
    parser.add_argument("units", nargs="*", default=list(UNITS))
    args = parser.parse_args()
    if importlib.util.find_spec("pytest") is None:
        print("suite_floor runs the tests: run `make venv-test system-packages openwebui-venv` first", file=sys.stderr)
        return 2
    cores = os.cpu_count() or 1
    budget = cores * args.minutes * 60
    background = idle_rate()
    print(f"{cores} cores; budget for {args.minutes:g} min: {budget:,.0f} CPU-s; idle machine {background:.3f} CPU-s/s")
    total_cpu = total_wall = 0.0
    failed = False
    for unit in args.units:
        wall, cpu, outcome = run_unit(unit, background)
        total_cpu, total_wall = total_cpu + cpu, total_wall + wall
        failed |= outcome.startswith("FAILED")
        print(f"{wall:7.1f} s  {cpu:7.1f} CPU-s  {unit}  [{outcome}]", flush=True)
    print(f"sum: {total_wall:,.0f} s wall, {total_cpu:,.0f} CPU-s = {100 * total_cpu / budget:.0f}% of the "
          f"{args.minutes:g}-minute budget on {cores} cores")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
