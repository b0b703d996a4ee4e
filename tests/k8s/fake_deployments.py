"""The cluster under a Deployment whose image has a local stand-in, on the local API server (fake_apiserver.py).

It plays the ReplicaSet controller (one pod from the template), the kubelet and container runtime (the
image's server started as a local process: `IMAGES` maps an image's repository to the command that stands
in for it; the pod's env is its own, each secretKeyRef read from the Secret it names, each emptyDir a fresh
directory), the readiness probe (the pod and the Deployment go ready once the probe's path answers 200), and
kube-proxy with cluster DNS (a Service's address is its pod's local port, or a `backends` URL for a Service
whose pod runs elsewhere, as the engine's simulator does; `*.svc.cluster.local` in the env resolves the
same way). The process's output is the pod's container log on the API server, line by line with when it was
written. Deleting the Deployment stops the process, as the kubelet would after the grace period.
`simulated_engine` stands in for an engine's image: the rendered wrapper around DayOne's simulator, with a
stand-in nvidia-smi on the pod's PATH.
What it does not play: the image's own filesystem (read-only root and user are not enforced here).
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from fake_apiserver import FakeApiServer
from tasks.core.ports import free_port
from tasks.sim.nvidia_smi import write_stand_in

REPO = Path(__file__).resolve().parents[2]

# (container command, local port) -> (argv, extra env): the image's server as a local process.
ImageStandIn = Callable[[list[str], int], tuple[list[str], dict[str, str]]]
_CLUSTER_DNS = re.compile(r"http://([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local:\d+")


def simulated_engine(dialect: str, profile: dict[str, Any], bin_dir: Path, draft: tuple[str, float] | None = None
                     ) -> ImageStandIn:
    """An engine's image as DayOne's simulator speaking `dialect`: the container's own wrapper (the GPU report and
    memory loop of tasks/telemetry/hardware.py) runs as rendered and execs the simulator in place of the engine's
    command; the pod's PATH has a stand-in nvidia-smi (tasks/sim/nvidia_smi.py) answering from the simulator's GPUs.
    `draft` (flag, MiB): an engine launched with that flag (speculative decoding) holds a draft model of that size
    on each card beside the profile's weights."""
    def stand_in(command: list[str], port: int) -> tuple[list[str], dict[str, str]]:
        wrapper = command[:4] if command[:2] == ["/bin/sh", "-c"] else []
        launched = profile
        if draft and any(arg.split("=")[0] == draft[0] for arg in command[4:]):
            gpus = launched.get("gpus") or {}
            launched = {**launched, "gpus": {**gpus, "weights_mib": gpus.get("weights_mib", 16_000.0) + draft[1]}}
        sim = [sys.executable, "-m", "tasks.sim", "--dialect", dialect, "--host", "127.0.0.1", "--port", str(port),
               "--profile-json", json.dumps(launched)]
        smi = write_stand_in(bin_dir / f"pod-{port}", f"http://127.0.0.1:{port}", launched)
        return [*wrapper, *sim], {"PATH": f"{smi.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                                  "PYTHONPATH": str(REPO)}

    return stand_in


def openwebui_from_venv(venv: Path) -> ImageStandIn:
    """OpenWebUI's image as its pip package in `venv`: the same server, on the pod's port mapped to a local
    one; FROM_INIT_PY is the pip package's layout of the files the image keeps under /app/build."""
    def stand_in(command: list[str], port: int) -> tuple[list[str], dict[str, str]]:
        argv = [str(venv / "bin" / "python") if command[0] == "python" else command[0], *command[1:]]
        argv[argv.index("--host") + 1] = "127.0.0.1"
        argv[argv.index("--port") + 1] = str(port)
        return argv, {"FROM_INIT_PY": "true"}

    return stand_in


class DeploymentKubelet:
    def __init__(self, server: FakeApiServer, workdir: Path, images: dict[str, ImageStandIn],
                 backends: dict[tuple[str, str], str] | None = None, ready_timeout_s: float = 240.0):
        self.server, self.workdir, self.images = server, Path(workdir), images
        self.backends = dict(backends or {})  # (namespace, Service) -> URL of a pod that runs elsewhere
        self.ready_timeout_s = ready_timeout_s
        self.ports: dict[tuple[str, str], int] = {}  # (namespace, pod) -> local port
        self.processes: dict[tuple[str, str], tuple[subprocess.Popen, str]] = {}  # (ns, Deployment) -> (proc, pod)
        self.envs: dict[str, dict[str, str]] = {}  # pod -> the env its process got (what the pod saw)
        self.errors: list[str] = []
        self.stopping: list[threading.Thread] = []
        server.watchers.append(self._heard)

    def _stand_in(self, image: str) -> ImageStandIn | None:
        name = image.split("@")[0]
        repository = name[:name.rindex(":")] if ":" in name.rsplit("/", 1)[-1] else name  # without its tag
        return next((f for repo, f in self.images.items() if repository.endswith(repo)), None)

    def _heard(self, event: str, resource: str, obj: dict[str, Any]) -> None:
        if resource != "deployments":
            return
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        [container] = obj["spec"]["template"]["spec"]["containers"]
        if event == "created" and self._stand_in(container["image"]):
            threading.Thread(target=self._run, args=(obj,), daemon=True).start()
        elif event == "deleted" and key in self.processes:  # not under the API server's lock: it may take seconds
            stopping = threading.Thread(target=self._stop, args=self.processes.pop(key), daemon=True)
            stopping.start()
            self.stopping.append(stopping)

    # ---- kube-proxy and cluster DNS ---------------------------------------------------------------
    def address(self, name: str, namespace: str) -> str | None:
        service = self.server.get("services", namespace, name)
        if service is not None:
            selector = ",".join(f"{k}={v}" for k, v in service["spec"]["selector"].items())
            for pod in self.server.list("pods", namespace, selector):
                port = self.ports.get((namespace, pod["metadata"]["name"]))
                if port:
                    return f"http://127.0.0.1:{port}"
        return self.backends.get((namespace, name))

    def service_url(self, name: str, namespace: str, port: int) -> str:
        """ClusterAccess.service_url: the worker reaches a Service as a pod would."""
        return self.address(name, namespace) or "http://127.0.0.1:9"

    def _resolve(self, value: str) -> str:
        return _CLUSTER_DNS.sub(lambda m: self.address(m.group(1), m.group(2)) or m.group(0), value)

    # ---- the pod ----------------------------------------------------------------------------------
    def _env(self, ns: str, container: dict[str, Any], mounts: dict[str, Path]) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        for e in container.get("env") or []:
            if "value" in e:
                value = self._resolve(e["value"])
                for path, local in mounts.items():
                    if value == path or value.startswith(path + "/"):
                        value = str(local) + value[len(path):]
                env[e["name"]] = value
                continue
            ref = e["valueFrom"]["secretKeyRef"]
            data = (self.server.get("secrets", ns, ref["name"]) or {}).get("data") or {}
            env[e["name"]] = base64.b64decode(data[ref["key"]]).decode()
        return env

    def _run(self, dep: dict[str, Any]) -> None:
        ns, name = dep["metadata"]["namespace"], dep["metadata"]["name"]
        try:
            pod = self.server.start_pod(ns, name, running=True)
            spec = dep["spec"]["template"]["spec"]
            [container] = spec["containers"]
            home = self.workdir / pod
            empty = {v["name"] for v in spec.get("volumes") or [] if "emptyDir" in v}
            mounts = {m["mountPath"]: home / m["mountPath"].lstrip("/") for m in container.get("volumeMounts") or []
                      if m["name"] in empty}
            for local in mounts.values():
                local.mkdir(parents=True, exist_ok=True)
            port = free_port()
            argv, extra = self._stand_in(container["image"])([*container["command"], *container.get("args", [])],
                                                             port)
            env = {**self._env(ns, container, mounts), **extra}
            self.envs[pod] = env
            proc = subprocess.Popen(argv, env=env, cwd=home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            self.processes[(ns, name)] = (proc, pod)
            self.ports[(ns, pod)] = port
            threading.Thread(target=self._log, args=(ns, pod, container["name"], proc), daemon=True).start()
            self._until_ready(ns, name, pod, proc, port, container["readinessProbe"]["httpGet"]["path"])
        except Exception as exc:  # noqa: BLE001 - a test reads it; the pod stays not ready
            self.errors.append(f"{name}: {exc!r}")

    def _log(self, ns: str, pod: str, container: str, proc: subprocess.Popen) -> None:
        """The container's output is its log on the API server, each line with when it was written."""
        key = (ns, pod, container, False)
        self.server.logs.setdefault(key, "")
        for line in iter(proc.stdout.readline, b""):
            text = line.decode("utf-8", "replace")
            self.server.log_lines.setdefault(key, []).append((time.time(), text))
            self.server.logs[key] = self.server.logs.get(key, "") + text

    def _until_ready(self, ns: str, name: str, pod: str, proc: subprocess.Popen, port: int, path: str) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code == 200:
                    if self.server.get("pods", ns, pod) is not None:
                        self.server.set_container_state(ns, pod, ready=True)
                        self.server.set_available(ns, name)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        if proc.poll() is not None and self.server.get("pods", ns, pod) is not None:
            self.server.set_container_state(ns, pod, ready=False, restartCount=1, state={
                "waiting": {"reason": "CrashLoopBackOff", "message": f"exited with {proc.returncode}"}})

    def _stop(self, proc: subprocess.Popen, pod: str) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    def running(self) -> list[str]:
        """The Deployments whose process still runs, once the stops under way have ended."""
        for stopping in self.stopping:
            stopping.join(timeout=20)
        return [name for (_, name), (proc, _) in self.processes.items() if proc.poll() is None]

    def close(self) -> None:
        for proc, pod in list(self.processes.values()):
            self._stop(proc, pod)
        self.processes.clear()
