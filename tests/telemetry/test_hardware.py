"""Where each engine ran: the node and its GPU feature-discovery labels with the UUIDs printed from inside
the pod (Kubernetes, against the local API server), what this machine reports (local), the record in the
hardware table, the manifest and the report's header, and the comparison's flags for overlapping slices
and different GPU products."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))

from fake_apiserver import FakeApiServer  # noqa: E402
from k8s_helpers import run_config  # noqa: E402
from tasks.state import documents as run_documents  # noqa: E402
from tasks.config import parse_run_config  # noqa: E402
from tasks.engines.context import EngineContext, endpoint_for  # noqa: E402
from tasks.telemetry import hardware  # noqa: E402
from tasks.evidence.startup_facts import record_startup_facts  # noqa: E402
from tasks.k8s.manifests import render_engine  # noqa: E402
from tasks.report.html import render_html  # noqa: E402
from tasks.report.summary import build_summary  # noqa: E402
from tasks.state.storage import RunDir  # noqa: E402
from tasks.state.tables import to_frame  # noqa: E402
from tasks.targets.kubernetes import ClusterAccess, KubernetesTarget  # noqa: E402
from tasks.targets.local import LocalTarget, this_node  # noqa: E402

UUIDS = ["GPU-3f1c0a52-8d1e-4c2b-9a57-0e6c1b2d3e41", "GPU-7a2b9c10-1d2e-4f3a-8b4c-5d6e7f809a12"]
# nvidia-smi --query-gpu=uuid,name,memory.total,driver_version --format=csv,noheader,nounits, then its header
FAKE_NVIDIA_SMI = f"""#!/bin/sh
if [ -n "$1" ]; then
  echo "{UUIDS[0]}, NVIDIA H20, 97871, 570.124.06"
  echo "{UUIDS[1]}, NVIDIA H20, 97871, 570.124.06"
else
  echo "| NVIDIA-SMI 570.124.06     Driver Version: 570.124.06     CUDA Version: 12.8     |"
fi
"""
GFD_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H20", "nvidia.com/gpu.memory": "97871", "nvidia.com/gpu.count": "8",
              "nvidia.com/cuda.driver-version.major": "570", "nvidia.com/cuda.driver-version.minor": "124",
              "nvidia.com/cuda.driver-version.revision": "06", "nvidia.com/cuda.runtime-version.major": "12",
              "nvidia.com/cuda.runtime-version.minor": "8"}


@pytest.fixture
def fake_smi(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(0o755)
    return bin_dir


def test_the_pods_container_prints_the_gpus_it_was_given_then_runs_the_engine(fake_smi):
    cfg = run_config(engines=("vllm",))
    objects = render_engine(cfg, cfg.engines[0], {"pinned_ref": "example.org/vllm@sha256:" + "2" * 64})
    container = objects[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["vllm", "serve"]  # the engine's own command line, unchanged
    out = subprocess.run([*container["command"], "echo", "engine up"], capture_output=True, text=True, timeout=20,
                         env={"PATH": f"{fake_smi}:/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES": ",".join(UUIDS)})
    # The GPU report comes before the engine; the memory loop beside the engine may print after it
    assert out.returncode == 0 and "\nengine up\n" in out.stdout
    before_engine = out.stdout.split("\nengine up\n", 1)[0]
    gpus, cuda, visible = hardware.gpus_from_startup_log(before_engine)
    assert [g["uuid"] for g in gpus] == UUIDS == visible and cuda == "12.8"
    # Without nvidia-smi in the image the engine still starts, and NVIDIA_VISIBLE_DEVICES names the GPUs.
    bare = subprocess.run([*container["command"], "echo", "engine up"], capture_output=True, text=True, timeout=20,
                          env={"PATH": "/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES": UUIDS[0]})
    assert bare.stdout.endswith("engine up\n") and hardware.gpus_from_startup_log(bare.stdout)[2] == UUIDS[:1]


def test_kubernetes_record_from_the_node_labels_and_the_pod(tmp_path, fake_smi):
    from kubernetes import config as kube_config

    api = FakeApiServer()
    try:
        target = KubernetesTarget(ClusterAccess(api_client=lambda conn: kube_config.new_client_from_config_dict(
            api.kubeconfig()), service_url=lambda name, ns, port: "http://127.0.0.1:9"))
        cfg = run_config(engines=("vllm",))
        run_dir = RunDir("run-1", root=tmp_path)
        dep = target.deploy(cfg, cfg.engines[0], run_dir, target.pin(cfg, cfg.engines[0]))
        api.add_node("h20-node-1", GFD_LABELS)
        pod = api.start_pod("bench", dep.handle["deployment"], running=True, ready=True, node="h20-node-1")
        container = api.get("pods", "bench", pod)["spec"]["containers"][0]
        printed = subprocess.run([*container["command"], "true"], capture_output=True, text=True, timeout=20,
                                 env={"PATH": f"{fake_smi}:/usr/bin:/bin"}).stdout
        api.set_log("bench", pod, printed + "INFO GPU KV cache size: 1,709,664 tokens\n")
        ectx = EngineContext(cfg, endpoint_for(cfg, "vllm", dep.base_url, dep.image_digest), run_dir)
        ctx = SimpleNamespace(engine=lambda e: ectx, run_dir=run_dir, config=cfg, target=target,
                              deployment=lambda e: dep)
        state_doc = {"engines": [{"name": "vllm"}]}
        run_dir.write_json(run_documents.MANIFEST, state_doc)
        facts = record_startup_facts(ctx, "vllm", target.startup_log(dep))
    finally:
        api.close()
    assert facts["node"] == "h20-node-1" and facts["gpus"] == 2 and facts["kv_tokens"] == 1_709_664
    [row] = run_dir.read_rows("hardware", "vllm")
    assert (row["gpu_product"], row["gpu_memory_mib"], row["driver_version"], row["cuda_version"]) == \
        ("NVIDIA-H20", 97871, "570.124.06", "12.8")
    assert row["gpu_uuids"] == UUIDS and row["sources"]["gpu_uuids"] == "nvidia-smi inside the engine's container"
    assert row["sources"]["gpu_product"] == "node label nvidia.com/gpu.product of h20-node-1"
    assert row["cpu_model"] is None and row["unknown"] == {"cpu_model": "not reported", "cpu_cores": "not reported"}
    assert run_documents.manifest(run_dir)["hardware"]["vllm"]["gpu_uuids"] == UUIDS
    assert list(to_frame("hardware", [row]).columns)[-1] == "unknown"


def test_local_record_is_what_this_machine_reports(tmp_path, monkeypatch, fake_smi):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n")
    cpu = hardware.local_machine("abc123", {}, cpuinfo_path=str(cpuinfo))
    if cpu["gpu_count"] == 0:  # this machine has no GPU: the CPU is the record
        assert cpu["sources"]["gpu_count"] in ("no nvidia-smi on this machine",
                                                                        "nvidia-smi found no GPU")
        assert hardware.unknown(cpu)["gpu_product"] == "no GPU"
    assert cpu["cpu_model"] == "AMD EPYC 9654 96-Core Processor" and cpu["cpu_cores"] >= 1
    monkeypatch.setenv("PATH", f"{fake_smi}:/usr/bin:/bin")
    one = hardware.local_machine("abc123", {"CUDA_VISIBLE_DEVICES": "1"}, cpuinfo_path=str(cpuinfo))
    assert (one["gpu_count"], one["gpu_uuids"], one["gpu_product"], one["cuda_version"]) == (1, UUIDS[1:], "NVIDIA H20",
                                                                                          "12.8")
    assert one["sources"]["gpu_uuids"] == "nvidia-smi on this machine"


def test_the_local_target_records_the_machine_its_simulator_runs_on(sims, tmp_path):
    sim = sims("sglang", {"model": "dayone-sim-model"})
    cfg = parse_run_config({"run_id": "hw", "engines": [{"name": "eng", "dialect": "sglang", "launcher": "sim"}],
                            "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False}}})
    from tasks.targets.base import Deployment

    dep = Deployment("eng", sim.url, "sha256:" + "0" * 64, {}, {"launcher": "sim", "node": this_node()})
    record = hardware.merge_pod_report(LocalTarget().hardware(cfg, dep), sim.log())
    assert record["node"] == this_node() and record["cpu_cores"] >= 1
    assert record["gpu_count"] is not None  # 0 on a machine without a GPU, else the GPUs it sees


def _write(run_dir: RunDir, engine: str, **record) -> None:
    row = {"run_id": "hw", "engine": engine, "image_digest": None, "scenario": "startup", "round": 0,
           "target": "kubernetes", **hardware.empty_record(), **record}
    with run_dir.rows("hardware", engine, "startup") as out:
        out.write(row)


def test_overlapping_slices_and_different_products_are_flagged_in_the_comparison(tmp_path):
    cfg = parse_run_config({"run_id": "hw", "engines": [{"name": n, "dialect": "vllm"} for n in ("a", "b", "c")],
                            "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False}}})
    run_dir = RunDir("hw", root=tmp_path)
    _write(run_dir, "a", node="n1", gpu_product="NVIDIA-H20", gpu_count=1, gpu_uuids=UUIDS[:1])
    _write(run_dir, "b", node="n1", gpu_product="NVIDIA-H20", gpu_count=2, gpu_uuids=UUIDS)
    _write(run_dir, "c", node="n2", gpu_product="NVIDIA-H100-80GB-HBM3", gpu_count=1, gpu_uuids=["GPU-99"])
    summary = build_summary(run_dir, cfg)
    assert summary.slice_findings == [
        f"a and b were given the same GPUs ({UUIDS[0][:12]}): their slices overlap",
        "engines ran on different GPU products: a on NVIDIA-H20, b on NVIDIA-H20, c on NVIDIA-H100-80GB-HBM3"]
    page = render_html(summary, charts={})
    assert page.count("their slices overlap") == 2  # the header and the comparison both say it
    assert "2 × NVIDIA-H20" in page and UUIDS[1] in page
    assert hardware.slice_findings({"a": {"gpu_uuids": UUIDS[:1]}, "b": {"gpu_uuids": UUIDS[1:]}}) == []


# ---- memory per card: the loop the engine pod's wrapper leaves running beside the engine -------------------

# nvidia-smi for the wrapper: the one-time report, and the memory query answering 70,000 + n MiB on its n-th call
MEMORY_SMI = f"""#!/bin/sh
case "$1" in
  --query-gpu=index,uuid,memory.used,memory.total)
    [ -n "$SMI_FAILS" ] && {{ echo "Unable to determine the device handle for GPU0000:18:00.0: Unknown Error"; exit 15; }}
    n=$(cat "$SMI_CALLS" 2>/dev/null || echo 0); echo $((n + 1)) > "$SMI_CALLS"
    echo "0, {UUIDS[0]}, $((70000 + n)), 97871"
    echo "1, {UUIDS[1]}, $((60000 + n)), 97871";;
  --query-gpu=*)
    echo "{UUIDS[0]}, NVIDIA H20, 97871, 570.124.06"
    echo "{UUIDS[1]}, NVIDIA H20, 97871, 570.124.06";;
  *) echo "| NVIDIA-SMI 570.124.06     Driver Version: 570.124.06     CUDA Version: 12.8     |";;
esac
"""
ENGINE_S = 2.0  # the stand-in engine runs this long, then says so


def _tools(tmp_path, smi: str | None) -> str:
    """A PATH with the wrapper's tools and, when given, an nvidia-smi: nothing else of this machine's."""
    import shutil

    bin_dir = tmp_path / ("bin-smi" if smi else "bin-bare")
    bin_dir.mkdir()
    for tool in ("sed", "date", "sleep", "head", "grep", "cat"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    if smi:
        (bin_dir / "nvidia-smi").write_text(smi)
        (bin_dir / "nvidia-smi").chmod(0o755)
    return str(bin_dir)


def _wrapped(interval_s: float | None) -> list[str]:
    cfg = run_config(engines=("vllm",), gpu_memory_interval_s=interval_s)
    objects = render_engine(cfg, cfg.engines[0], {"pinned_ref": "example.org/vllm@sha256:" + "2" * 64})
    return objects[0]["spec"]["template"]["spec"]["containers"][0]["command"]


def _run_engine(tmp_path, path: str, interval_s: float | None = 0.5, **env: str) -> tuple[str, float]:
    import time

    started = time.monotonic()
    out = subprocess.run([*_wrapped(interval_s), "/bin/sh", "-c", f"sleep {ENGINE_S}; echo engine up"],
                         capture_output=True, text=True, timeout=30,
                         env={"PATH": path, "SMI_CALLS": str(tmp_path / "calls"), **env})
    assert out.returncode == 0, out.stderr
    return out.stdout, time.monotonic() - started


def test_the_pod_prints_memory_per_card_every_period_while_the_engine_runs_and_stops_with_it(tmp_path):
    import time

    before = time.time()
    printed, took = _run_engine(tmp_path, _tools(tmp_path, MEMORY_SMI))
    assert "engine up\n" in printed and hardware.gpus_from_startup_log(printed)[0][0]["uuid"] == UUIDS[0]
    readings, notes = hardware.memory_readings(printed)
    assert notes == []
    # a reading every 0.5 s of the engine's 2 s (plus each call's own time): each stamped by the pod's clock
    # before and after its call
    assert 3 <= len(readings) <= 6, readings
    stamps = [t for start, end, _ in readings for t in (start, end)]
    assert stamps == sorted(stamps) and before <= stamps[0] and stamps[-1] <= before + took
    assert all(0.4 <= b[0] - a[0] <= 1.5 for a, b in zip(readings, readings[1:])), readings
    for n, (_, _, cards) in enumerate(readings):  # the n-th call's values, per GPU UUID
        assert cards == {UUIDS[0]: [70000.0 + n, 97871.0], UUIDS[1]: [60000.0 + n, 97871.0]}
    # the loop ends with the engine: the container's output closes at most a second after the engine's end
    assert took < ENGINE_S + 1.5, took


def test_without_nvidia_smi_or_with_a_failing_one_the_engine_runs_and_one_line_says_why(tmp_path):
    bare, _ = _run_engine(tmp_path, _tools(tmp_path, None))
    assert bare.endswith("engine up\n")
    assert hardware.memory_readings(bare) == ([], ["no nvidia-smi in the container: memory per card is not read"])
    failing, took = _run_engine(tmp_path, _tools(tmp_path, MEMORY_SMI), SMI_FAILS="1")
    assert failing.endswith("engine up\n") and took < ENGINE_S + 1.5
    assert hardware.memory_readings(failing) == ([], [
        "nvidia-smi failed, memory per card no longer read: Unable to determine the device handle for "
        "GPU0000:18:00.0: Unknown Error"])
    # switched off (kubernetes.gpu_memory_interval_s: null): the one-time report alone, as before
    (tmp_path / "off").mkdir()
    off, _ = _run_engine(tmp_path, _tools(tmp_path / "off", MEMORY_SMI), interval_s=None)
    assert off.endswith("engine up\n") and hardware.GPU_MEMORY_MARKER not in off
    assert hardware.gpus_from_startup_log(off)[0][0]["uuid"] == UUIDS[0]
