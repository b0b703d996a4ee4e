"""The DCGM exporter's dialect: its default counters' names and units, its labels, how often it refreshes, and
where DayOne's simulator serves one. Read by tasks/telemetry/gpu.py and served by the simulator; kept
apart so the simulator's process does not load the reader's HTTP and parsing stack."""

from __future__ import annotations

# dcgm-exporter's default counters (NVIDIA/dcgm-exporter etc/default-counters.csv), with their units.
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # gauge, percent
FB_USED = "DCGM_FI_DEV_FB_USED"  # gauge, MiB
FB_FREE = "DCGM_FI_DEV_FB_FREE"  # gauge, MiB (a default counter: total = FB_FREE + FB_USED, reserved aside)
# Not a default counter, exposed where the exporter's counters file adds it; preferred to FREE + USED when there.
FB_TOTAL = "DCGM_FI_DEV_FB_TOTAL"  # gauge, MiB
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"  # gauge, W
TOTAL_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # counter, mJ since boot
NAMES = (GPU_UTIL, FB_USED, FB_FREE, FB_TOTAL, POWER_USAGE, TOTAL_ENERGY)
UUID_LABEL = "UUID"
INDEX_LABEL = "gpu"
# Where the simulator serves its exporter (a real exporter is its own endpoint, usually :9400/metrics).
SIMULATOR_PATH = "/dcgm/metrics"
# dcgm-exporter's default collect-interval (NVIDIA/dcgm-exporter pkg/cmd/app.go: Value 30000, "Unit is
# milliseconds"); the simulator's exporter refreshes this often unless its profile says otherwise.
DCGM_EXPORTER_DEFAULT_REFRESH_S = 30.0
