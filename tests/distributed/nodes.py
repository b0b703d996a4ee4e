"""Each Celery worker of the distributed stack as a host of its own, on this one machine.

A node is a network namespace with its own address on a bridge, entered with a UTS namespace (its own host
name) and a mount namespace (its own /tmp and /etc/hosts); its disk (HOME, AIRFLOW_HOME, DAYONE_WORKDIR,
/tmp) is a tmpfs of its own under /run/dayone-nodes, so the file audit (file_audit.py) can tell whose file an open touched.

    hub namespace:   bridge br0, one port per node
    node namespace:  eth0 (veth to the hub), 10.231.0.N/24, lo; 127.0.0.1 carries the deployment's
                     services by way of loopback_forward.py

Every address lives in a namespace made here, no route leads anywhere else, and nothing is added to this
machine's own network namespace. Names carry the creating process's id (dyd<pid>-...): `create` first
removes what a run that died before its teardown left behind.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PREFIX = "dyd"
SUBNET = "10.231.0"  # /24, inside the nodes' namespaces only
NETNS_DIR = Path("/run/netns")
DISKS = Path("/run/dayone-nodes")  # outside /tmp, which each node replaces by its own
# In the node's namespaces: its host name, its /tmp and /etc/hosts, then the command.
_ENTER = 'hostname "$1" && mount --bind "$3" /etc/hosts && mount --bind "$2" /tmp && shift 3 && exec "$@"'
# The code every host has (the checkout and its virtual environment): where it lies under /tmp (a CI clone
# may), the node's own /tmp would hide it, so it is bound back in at the same path, read-only.
_KEEP = "mkdir -p {outer} && mount --bind /tmp {outer}"
_KEEP_EACH = "mkdir -p {path} && mount --bind -o ro {outer}/{rel} {path}"


def shared_code() -> list[Path]:
    """The checkout and the interpreter's environment, where they lie under /tmp."""
    here = {Path(__file__).resolve().parents[2], Path(sys.prefix).resolve()}
    under_tmp = [p for p in here if Path("/tmp") in p.parents]
    return sorted(p for p in under_tmp if not any(q in p.parents for q in under_tmp))  # a venv inside the checkout goes with it


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def _namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


@dataclass(frozen=True)
class Node:
    name: str  # its host name
    netns: str
    address: str
    root: Path  # its disk, a tmpfs

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns

    def enter(self, argv: list[str]) -> list[str]:
        """`argv` run as this node: its network, its host name, its /tmp and /etc/hosts."""
        script = _ENTER
        keep = shared_code()
        if keep:
            outer = shlex.quote(str(self.root / ".host-tmp"))
            binds = [_KEEP_EACH.format(path=shlex.quote(str(p)), outer=outer,
                                       rel=shlex.quote(str(p.relative_to("/tmp")))) for p in keep]
            script = script.replace('mount --bind "$2" /tmp', " && ".join(
                [_KEEP.format(outer=outer), 'mount --bind "$2" /tmp', *binds, f"umount -l {outer}"]))
        return ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--uts", "--propagation", "private",
                "sh", "-c", script, self.name, self.name, str(self.root / "tmp"), str(self.root / "hosts"), *argv]


class NodeNetwork:
    def __init__(self, names: list[str]):
        tag = f"{PREFIX}{os.getpid()}"
        self.hub = f"{tag}-hub"
        self.nodes = [Node(name, f"{tag}-{name}", f"{SUBNET}.{i + 2}", DISKS / f"{tag}-{name}")
                      for i, name in enumerate(names)]

    def create(self) -> list[Node]:
        _remove_orphans()
        _ip("netns", "add", self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for i, node in enumerate(self.nodes):
            port = f"port{i}"
            _ip("netns", "add", node.netns)
            # created inside the node's namespace, its peer moved into the hub's: no end ever in ours
            _ip("-n", node.netns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", self.hub)
            _ip("-n", self.hub, "link", "set", port, "master", "br0", "up")
            _ip("-n", node.netns, "addr", "add", f"{node.address}/24", "dev", "eth0")
            _ip("-n", node.netns, "link", "set", "eth0", "up")
            _ip("-n", node.netns, "link", "set", "lo", "up")
            node.root.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4g,mode=0755", f"{node.netns}-disk", str(node.root)],
                           check=True, capture_output=True, timeout=30)
            (node.root / "tmp").mkdir(mode=0o1777)
            (node.root / "hosts").write_text(f"127.0.0.1 localhost\n{node.address} {node.name}\n")
        return self.nodes

    def remove(self) -> None:
        """Unmount the nodes' disks and delete the namespaces (their veths go with them); safe to repeat."""
        for node in self.nodes:
            subprocess.run(["umount", "--lazy", str(node.root)], capture_output=True, timeout=30)
            _rmdir(node.root)
        for name in (*(n.netns for n in self.nodes), self.hub):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def _remove_orphans() -> None:
    """Namespaces (and their disks) of a stack whose process is gone."""
    for name in _namespaces():
        found = re.fullmatch(rf"{PREFIX}(\d+)-.+", name)
        if found and not _alive(int(found.group(1))):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
    for line in Path("/proc/mounts").read_text().splitlines():
        source, target = line.split()[:2]
        found = re.fullmatch(rf"{PREFIX}(\d+)-.+-disk", source)
        if found and not _alive(int(found.group(1))):
            subprocess.run(["umount", "--lazy", target], capture_output=True, timeout=30)
            _rmdir(Path(target))


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
