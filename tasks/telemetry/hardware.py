"""Where each engine ran: node, GPU product and memory, GPU count, driver and CUDA versions, the GPU
UUIDs the engine actually got; CPU model and cores where there is no GPU. One `hardware` row per engine.

Facts come from the platform (a Kubernetes node's GPU feature-discovery labels; locally nvidia-smi,
/proc/cpuinfo) and from inside the engine's pod (GPU_REPORT_SCRIPT prints `nvidia-smi`'s view before
the engine's own command, so the UUIDs are the pod's); the row's `sources` names which. Two engines
given the same GPU UUIDs, or different GPU products, are flagged (slice_findings; PROTOCOL.md section 8,
"What the engine spent").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

GPU_REPORT_MARKER = "dayone-gpu:"
GPU_QUERY = "uuid,name,memory.total,driver_version"
# Run in the engine's container before its command (a pod's GPUs are only visible from inside it);
# never fails the container: a missing nvidia-smi is reported and the engine starts all the same.
GPU_REPORT_SCRIPT = (  # the one-time report; gpu_report_script adds the memory loop
    f'echo "{GPU_REPORT_MARKER} visible=${{NVIDIA_VISIBLE_DEVICES:-}}"; '
    f"(nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader,nounits "
    "&& nvidia-smi | grep -o 'CUDA Version: [0-9.]*') 2>&1 "
    f'| sed "s/^/{GPU_REPORT_MARKER} /"; exec "$@"'
)
# Memory per card while the engine runs: the same wrapper leaves a loop behind that prints nvidia-smi's used
# and total framebuffer per card every `interval_s` as marked, self-stamped lines of the container's log (the
# node's clock, as the kubelet's stamps; the kept log carries no kubelet stamps). Read from that log, not by
# exec into the pod: pods/exec is a strong privilege DayOne's Role does not hold. Neither a missing nor a
# failing nvidia-smi stops the engine: one line says so and the loop ends.
GPU_MEMORY_MARKER = "dayone-gpu-memory:"
GPU_MEMORY_QUERY = "index,uuid,memory.used,memory.total"
# "<unix time before the call> <unix time after it> <index>, <uuid>, <used MiB>, <total MiB>" (date's %N where the
# image's date has it; a time after the second may be absent: the call took no time worth stating)
GPU_MEMORY_ROW = re.compile(r"^(?P<ts>\d+(?:\.\d+)?)\S*\s+(?:(?P<ts_end>\d+(?:\.\d+)?)\S*\s+)?(?P<index>\d+), "
                            r"(?P<uuid>GPU-[0-9a-fA-F-]+), (?P<used>\d+(?:\.\d+)?), (?P<total>\d+(?:\.\d+)?)\s*$")


def gpu_report_script(memory_interval_s: float | None) -> str:
    """GPU_REPORT_SCRIPT with the memory loop before the exec (None: no loop). The loop lives as long as the
    engine: $$ is the shell that becomes the engine, and the loop ends once that process is gone or a zombie,
    checked every second of its wait (it shares the container's output, which must close with the engine)."""
    if not memory_interval_s:
        return GPU_REPORT_SCRIPT
    m = GPU_MEMORY_MARKER
    step = min(float(memory_interval_s), 1.0)
    steps = max(1, round(float(memory_interval_s) / step))
    alive = "alive() { s=$(sed -n 's/.*) \\([A-Za-z]\\) .*/\\1/p' /proc/$$/stat 2>/dev/null); [ -n \"$s\" ] && [ \"$s\" != Z ]; }; "
    loop = (
        "if command -v nvidia-smi >/dev/null 2>&1; then " + alive +
        "( while alive; do now=$(date +%s.%N); "
        f"if ! rows=$(nvidia-smi --query-gpu={GPU_MEMORY_QUERY} --format=csv,noheader,nounits 2>&1); then "
        f'printf "%s\\n" "$rows" | head -n 3 | sed "s/^/{m} nvidia-smi failed, memory per card no longer read: /"; '
        "break; fi; "
        f'done_at=$(date +%s.%N); printf "%s\\n" "$rows" | sed "s/^/{m} $now $done_at /"; '
        f"n=0; while [ $n -lt {steps} ] && alive; do sleep {step:g}; n=$((n + 1)); done; done ) & "
        f'else echo "{m} no nvidia-smi in the container: memory per card is not read"; fi; '
    )
    return GPU_REPORT_SCRIPT.removesuffix('exec "$@"') + loop + 'exec "$@"'


def memory_readings(text: str) -> tuple[list[tuple[float, float, dict[str, list[float]]]], list[str]]:
    """The memory loop's readings in a container log, in time order: (Unix time before nvidia-smi's call, after it,
    {GPU UUID: [used MiB, total MiB]}); and its notes (no nvidia-smi, a failure). A card nvidia-smi answers [N/A]
    for (MIG) is left out. The values were taken somewhere between the two times."""
    stamped: dict[tuple[float, float], dict[str, list[float]]] = {}
    notes: list[str] = []
    for line in text.splitlines():
        if GPU_MEMORY_MARKER not in line:
            continue
        body = line.split(GPU_MEMORY_MARKER, 1)[1].strip()
        m = GPU_MEMORY_ROW.match(body)
        if m:
            span = (float(m["ts"]), float(m["ts_end"] or m["ts"]))
            stamped.setdefault(span, {})[m["uuid"]] = [float(m["used"]), float(m["total"])]
        elif not re.match(r"^\d+(?:\.\d+)?\S*\s", body) and body not in notes:
            notes.append(body)
    return [(start, end, cards) for (start, end), cards in sorted(stamped.items())], notes


GPU_ROW = re.compile(r"^(?P<uuid>GPU-[0-9a-fA-F-]+), (?P<name>[^,]+), (?P<mib>\d+), (?P<driver>[\w.]+)$")
CUDA_VERSION = re.compile(r"CUDA Version: (?P<version>[\d.]+)")

# NVIDIA GPU feature discovery labels; older GFD releases used the second spelling.
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_MEMORY_MIB = "nvidia.com/gpu.memory"
LABEL_COUNT = "nvidia.com/gpu.count"
DRIVER_LABELS = (("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver-version.minor",
                  "nvidia.com/cuda.driver-version.revision"),
                 ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev"))
CUDA_LABELS = (("nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor"),
               ("nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor"))

FIGURES = ("node", "gpu_product", "gpu_memory_mib", "gpu_count", "driver_version", "cuda_version", "gpu_uuids",
           "cpu_model", "cpu_cores")


def empty_record() -> dict[str, Any]:
    return {name: None for name in FIGURES} | {"sources": {}}


def _set(record: dict[str, Any], figure: str, value: Any, source: str) -> None:
    if value is None or value == [] or record.get(figure) is not None:
        return  # the first source that knows a figure keeps it
    record[figure] = value
    record["sources"][figure] = source


# ---- GPUs as nvidia-smi lists them (this machine, or inside a pod) --------------------------------


def parse_gpu_rows(lines: list[str]) -> tuple[list[dict[str, Any]], str | None]:
    """nvidia-smi --query-gpu rows (GPU_QUERY) and the CUDA version its header states."""
    gpus, cuda = [], None
    for line in lines:
        line = line.strip()
        m = GPU_ROW.match(line)
        if m:
            gpus.append({"uuid": m["uuid"], "name": m["name"].strip(), "memory_mib": int(m["mib"]),
                         "driver": m["driver"]})
        elif c := CUDA_VERSION.search(line):
            cuda = c["version"]
    return gpus, cuda


def add_gpus(record: dict[str, Any], gpus: list[dict[str, Any]], cuda: str | None, source: str) -> None:
    if not gpus:
        return
    _set(record, "gpu_uuids", [g["uuid"] for g in gpus], source)
    _set(record, "gpu_count", len(gpus), source)
    _set(record, "gpu_product", ", ".join(sorted({g["name"] for g in gpus})), source)
    _set(record, "gpu_memory_mib", max(g["memory_mib"] for g in gpus), source)
    _set(record, "driver_version", gpus[0]["driver"], source)
    _set(record, "cuda_version", cuda, source)


def gpus_from_startup_log(text: str) -> tuple[list[dict[str, Any]], str | None, list[str]]:
    """What GPU_REPORT_SCRIPT printed in the engine's container: (GPUs, CUDA version, visible device ids)."""
    lines = [line.split(GPU_REPORT_MARKER, 1)[1].strip() for line in text.splitlines() if GPU_REPORT_MARKER in line]
    visible: list[str] = []
    for line in lines:
        if line.startswith("visible="):
            visible = [v for v in line.removeprefix("visible=").split(",") if v.startswith("GPU-")]
    gpus, cuda = parse_gpu_rows(lines)
    return gpus, cuda, visible


# ---- this machine ---------------------------------------------------------------------------------


def _cpu_model(cpuinfo: str) -> str | None:
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            return value.strip()
    return None


def visible_to(gpus: list[dict[str, Any]], cuda_visible_devices: str | None) -> list[dict[str, Any]]:
    """The GPUs a process with this CUDA_VISIBLE_DEVICES sees (indices or UUIDs); unset: all of them."""
    if cuda_visible_devices is None:
        return gpus
    wanted = [v.strip() for v in cuda_visible_devices.split(",") if v.strip()]
    out = []
    for w in wanted:
        if w.isdigit() and int(w) < len(gpus):
            out.append(gpus[int(w)])
        else:
            out += [g for g in gpus if g["uuid"].startswith(w)]
    return out


def local_machine(node: str, engine_env: Mapping[str, str], run: Any = subprocess.run,
                  cpuinfo_path: str = "/proc/cpuinfo") -> dict[str, Any]:
    """This machine's record for an engine process started with `engine_env`: its GPUs (nvidia-smi,
    narrowed to the engine's CUDA_VISIBLE_DEVICES) or, without one, its CPU model and cores."""
    record = empty_record()
    _set(record, "node", node, "this machine (a hash of its host name)")
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            rows = run([smi, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"], capture_output=True,
                       text=True, timeout=20).stdout.splitlines()
            header = run([smi], capture_output=True, text=True, timeout=20).stdout.splitlines()
        except (OSError, subprocess.SubprocessError):
            rows, header = [], []
        gpus, _ = parse_gpu_rows(rows)
        _, cuda = parse_gpu_rows(header)
        env_value = engine_env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
        add_gpus(record, visible_to(gpus, env_value), cuda, "nvidia-smi on this machine")
    try:
        model = _cpu_model(Path(cpuinfo_path).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        model = None
    _set(record, "cpu_model", model, "/proc/cpuinfo")
    _set(record, "cpu_cores", os.cpu_count(), "os.cpu_count() on this machine")
    if record["gpu_count"] is None:
        _set(record, "gpu_count", 0, "nvidia-smi found no GPU" if smi else "no nvidia-smi on this machine")
    return record


# ---- a Kubernetes node ----------------------------------------------------------------------------


def _version(labels: Mapping[str, str], spellings: tuple[tuple[str, ...], ...]) -> str | None:
    for keys in spellings:
        parts = [labels.get(k) for k in keys]
        if parts[0] is not None:
            return ".".join(p for p in parts if p is not None)
    return None


def kubernetes_node(node_name: str | None, node: Mapping[str, Any] | None, pod_gpus: int | None) -> dict[str, Any]:
    """The record from the pod's node and its GPU feature-discovery labels, and the GPUs the pod asked for."""
    record = empty_record()
    _set(record, "node", node_name, "the pod's spec.nodeName")
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    where = f"node label {{}} of {node_name}"
    _set(record, "gpu_product", labels.get(LABEL_PRODUCT), where.format(LABEL_PRODUCT))
    memory = labels.get(LABEL_MEMORY_MIB)
    _set(record, "gpu_memory_mib", int(memory) if memory and memory.isdigit() else None, where.format(LABEL_MEMORY_MIB))
    _set(record, "driver_version", _version(labels, DRIVER_LABELS), where.format("nvidia.com/cuda.driver*"))
    _set(record, "cuda_version", _version(labels, CUDA_LABELS), where.format("nvidia.com/cuda.runtime*"))
    _set(record, "gpu_count", pod_gpus, "the pod's nvidia.com/gpu limit")
    return record


def merge_pod_report(record: dict[str, Any], startup_log: str) -> dict[str, Any]:
    """Add what the engine's container printed about its GPUs: the UUIDs it was given come from here."""
    gpus, cuda, visible = gpus_from_startup_log(startup_log)
    source = "nvidia-smi inside the engine's container"
    if gpus:
        uuids = [g["uuid"] for g in gpus]
        record["gpu_uuids"], record["sources"]["gpu_uuids"] = uuids, source
        record["gpu_count"], record["sources"]["gpu_count"] = len(uuids), source
    elif visible:
        record["gpu_uuids"] = visible
        record["sources"]["gpu_uuids"] = "NVIDIA_VISIBLE_DEVICES inside the engine's container"
    add_gpus(record, gpus, cuda, source)
    return record


def unknown(record: Mapping[str, Any]) -> dict[str, str]:
    """The figures no source stated, with why (a CPU machine has no GPU product)."""
    no_gpu = record.get("gpu_count") == 0
    out = {}
    for name in FIGURES:
        if record.get(name) is None:
            gpu_figure = name.startswith("gpu_") or name in ("driver_version", "cuda_version")
            out[name] = "no GPU" if no_gpu and gpu_figure else "not reported"
    return out


# ---- across engines ---------------------------------------------------------------------------------


def slice_findings(records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Sentences for engines whose GPU slices overlap (the same GPU UUIDs), or that ran on different GPU
    products: either makes a comparison between them something other than engine against engine."""
    out = []
    names = sorted(records)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = sorted(set(records[a].get("gpu_uuids") or []) & set(records[b].get("gpu_uuids") or []))
            if shared:
                out.append(f"{a} and {b} were given the same GPUs ({', '.join(u[:12] for u in shared)}): "
                           "their slices overlap")
    products = {n: r.get("gpu_product") for n, r in records.items() if r.get("gpu_product")}
    if len(set(products.values())) > 1:
        out.append("engines ran on different GPU products: " +
                   ", ".join(f"{n} on {p}" for n, p in sorted(products.items())))
    return out


def fairness_boundary(records: Mapping[str, Mapping[str, Any]], together: list[list[str]]) -> list[str]:
    """The boundary of each comparison between two engines, in the Day-1 report's words: whether they shared a
    node, whether they ran on the same GPU UUIDs or on different ones, and whether up together or one after
    the other (`together`: the run's positions, the engines of one up at the same time). The same UUIDs in
    series is the gold standard; different GPUs of one node still share the host's CPU, memory and storage."""
    out = []
    names = [n for n in records]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ra, rb = records[a], records[b]
            at_once = any(a in p and b in p for p in together)
            when = "up together" if at_once else "one after the other"
            node_a, node_b = ra.get("node"), rb.get("node")
            if node_a is None or node_b is None:
                where = "on nodes not both recorded"
            elif node_a == node_b:
                where = f"on the same node ({node_a})"
            else:
                where = f"on different nodes ({node_a}, {node_b}): host CPU, memory, storage and network differ too"
            out.append(f"{a} and {b} ran {where}, {when}; " + _gpus_boundary(ra, rb, at_once, node_a == node_b))
    return out


def _gpus_boundary(ra: Mapping[str, Any], rb: Mapping[str, Any], at_once: bool, same_node: bool) -> str:
    ua, ub = set(ra.get("gpu_uuids") or []), set(rb.get("gpu_uuids") or [])
    if ra.get("gpu_count") == 0 and rb.get("gpu_count") == 0:
        return "neither had a GPU" + (": they shared the host's CPU" if at_once and same_node else "")
    if not ua or not ub:
        return "which GPUs each got is not known (no UUIDs recorded), so whether they shared GPUs is unproven"
    if ua == ub:
        if at_once:
            return "on the same GPU UUIDs at the same time: their slices overlap, so each measured the other's load"
        return "on the same GPU UUIDs, in series: the gold standard of an A/B"
    if ua & ub:
        return "on GPU slices that overlap in part: not an A/B of engines alone"
    if same_node:
        return ("on different GPUs of that node (non-overlapping slices): the host's CPU, memory and storage paths "
                "are still shared, and it is not the gold standard of a serial re-test on the same GPU UUIDs, so "
                "small differences are no general conclusion about the engines")
    return "on different GPUs: the GPUs themselves may differ too (not the same UUIDs in series)"
