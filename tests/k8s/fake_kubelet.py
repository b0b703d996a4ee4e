"""A minimal kubelet for DayOne's runner pods on the local API server (fake_apiserver.py).

When a pod labelled as a runner step is created it is scheduled by its required pod affinity (onto the
node of the pod it names; Pending while none matches), then its container's command runs as a local
process: the image's `dayone` is this venv's `python -m tasks.cli`, its env is the pod's own with each
secretKeyRef read from the Secret it names (none of this process's environment leaks in), and its
emptyDirs are fresh directories. The pod goes Running, then Succeeded or Failed with the container's
exit code in containerStatuses; its output is the container log, served (and followed) by the API
server. The downward API's status.podIP is 127.0.0.1: every pod's process runs on this host. Deleting the pod kills the process, as the kubelet would after the grace period.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from fake_apiserver import RUNNER_TOKEN, FakeApiServer, rfc3339

REPO = Path(__file__).resolve().parents[2]
RUNNER_COMPONENT = ("app.kubernetes.io/component", "runner-step")


class FakeKubelet:
    def __init__(self, server: FakeApiServer, workdir: Path):
        self.server, self.workdir = server, Path(workdir)
        self.processes: dict[tuple[str, str], subprocess.Popen] = {}
        self.exit_codes: dict[str, int] = {}  # pod name -> its container's exit code
        self.kubeconfig = self.workdir / "serviceaccount-kubeconfig.yaml"  # the mounted token's stand-in
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.write_text(yaml.safe_dump(server.kubeconfig(token=RUNNER_TOKEN)))
        server.watchers.append(self._heard)

    def _heard(self, event: str, resource: str, pod: dict[str, Any]) -> None:
        labels = pod["metadata"].get("labels") or {}
        if resource != "pods" or labels.get(RUNNER_COMPONENT[0]) != RUNNER_COMPONENT[1]:
            return
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if event == "created":
            threading.Thread(target=self._run, args=(pod,), daemon=True).start()
        elif event == "deleted" and key in self.processes and self.processes[key].poll() is None:
            os.killpg(self.processes[key].pid, signal.SIGTERM)

    # ---- the pod's status, as the kubelet reports it -----------------------------------------------
    def _status(self, ns: str, name: str, status: dict[str, Any], node: str | None = None) -> bool:
        with self.server.lock:
            pod = self.server.objects.get(("pods", ns, name))
            if pod is None:
                return False
            pod["status"] = status
            if node:
                pod["spec"]["nodeName"] = node
            pod["metadata"]["resourceVersion"] = str(next(self.server._rv))
            return True

    def _node_by_affinity(self, pod: dict[str, Any]) -> str | None:
        terms = (((pod["spec"].get("affinity") or {}).get("podAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        if not terms:
            return "node-any"
        wanted = terms[0]["labelSelector"]["matchLabels"]
        selector = ",".join(f"{k}={v}" for k, v in wanted.items())
        nodes = [p["spec"].get("nodeName") for p in self.server.list("pods", pod["metadata"]["namespace"], selector)]
        return next((n for n in nodes if n), None)

    def _env(self, ns: str, container: dict[str, Any], home: Path) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "LANG": "C.UTF-8"}
        for e in container.get("env") or []:
            if "value" in e:
                env[e["name"]] = e["value"]
                continue
            if "fieldRef" in e["valueFrom"]:  # the downward API: every pod's address is this host's
                assert e["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP", e
                env[e["name"]] = "127.0.0.1"
                continue
            ref = e["valueFrom"]["secretKeyRef"]
            data = (self.server.get("secrets", ns, ref["name"]) or {}).get("data") or {}
            if ref["key"] not in data:
                raise LookupError(f'couldn\'t find key {ref["key"]} in Secret {ns}/{ref["name"]}')
            env[e["name"]] = base64.b64decode(data[ref["key"]]).decode()
        # the emptyDirs at /tmp and /work are directories of this pod's own
        for var in ("HOME", "MPLCONFIGDIR", "DAYONE_WORKDIR"):
            if var in env:
                env[var] = str(home / env[var].lstrip("/"))
        return env

    def _run(self, pod: dict[str, Any]) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        [container] = pod["spec"]["containers"]
        node = self._node_by_affinity(pod)
        if node is None:
            self._status(ns, name, {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: pod affinity rules not met"}]})
            return
        home = self.workdir / name
        argv = [*container.get("command", []), *container.get("args", [])]
        if argv and argv[0] == "dayone":
            argv = [sys.executable, "-m", "tasks.cli", *argv[1:]]
        try:
            env = self._env(ns, container, home)
        except LookupError as exc:  # the kubelet's CreateContainerConfigError: the pod waits
            self._status(ns, name, {"phase": "Pending", "containerStatuses": [
                {"name": container["name"], "image": container["image"], "imageID": "", "ready": False,
                 "restartCount": 0, "state": {"waiting": {"reason": "CreateContainerConfigError",
                                                          "message": str(exc)}}}]}, node)
            return
        if pod["spec"].get("automountServiceAccountToken"):
            env["KUBECONFIG"] = str(self.kubeconfig)
        started = rfc3339()
        running = {"name": container["name"], "image": container["image"], "imageID": "", "ready": True,
                   "restartCount": 0, "started": True, "state": {"running": {"startedAt": started}}}
        if not self._status(ns, name, {"phase": "Running", "containerStatuses": [running],
                                       "conditions": [{"type": "PodScheduled", "status": "True"}]}, node):
            return
        key = (ns, name, container["name"], False)
        self.server.logs[key] = ""
        proc = subprocess.Popen(argv, env=env, cwd=home.mkdir(parents=True, exist_ok=True) or home,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes[(ns, name)] = proc
        for line in iter(proc.stdout.readline, b""):
            text = line.decode("utf-8", "replace")
            self.server.log_lines.setdefault(key, []).append((time.time(), text))
            self.server.logs[key] = self.server.logs.get(key, "") + text
        code = proc.wait()
        self.exit_codes[name] = code
        terminated = {**running, "ready": False, "started": False,
                      "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                               "startedAt": started, "finishedAt": rfc3339()}}}
        self._status(ns, name, {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [terminated],
                                "conditions": [{"type": "PodScheduled", "status": "True"}]})
        self.server.finished_logs.add((ns, name))
