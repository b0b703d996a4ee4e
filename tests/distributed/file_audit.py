"""Which node opened which node's files: fanotify permission events on every node's disk.

    python file_audit.py OUT.jsonl NAME=NETNS_PATH=DISK ...

Each node's disk is a filesystem of its own (nodes.py), marked whole (FAN_MARK_FILESYSTEM), so an open is
seen from every mount namespace. An open waits until this process has looked at it (FAN_OPEN_PERM), so the
opening process is still there to be named: its network namespace says its node. Every open is allowed;
one by a node of another node's file is written to OUT.jsonl. Opens by this machine's own processes (the
control plane, the test reading a worker's log for its report) are not a node's. Prints `ready` once the
disks are marked.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys

FAN_CLOEXEC, FAN_CLASS_CONTENT = 0x1, 0x4
FAN_MARK_ADD, FAN_MARK_FILESYSTEM = 0x1, 0x100
FAN_OPEN_PERM, FAN_ALLOW = 0x10000, 0x1
AT_FDCWD = -100
EVENT = struct.Struct("=IBBHQii")  # struct fanotify_event_metadata
RESPONSE = struct.Struct("=iI")  # struct fanotify_response

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]


def _check(result: int, what: str) -> int:
    if result < 0:
        raise OSError(ctypes.get_errno(), what)
    return result


def _read(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def main() -> None:
    out = open(sys.argv[1], "a", encoding="utf-8")
    nodes = [arg.split("=", 2) for arg in sys.argv[2:]]
    node_of_netns = {f"net:[{os.stat(netns).st_ino}]": name for name, netns, _ in nodes}
    node_of_disk = {os.stat(disk).st_dev: name for name, _, disk in nodes}
    fan = _check(_libc.fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC, os.O_RDONLY | os.O_LARGEFILE), "fanotify_init")
    for _, _, disk in nodes:
        _check(_libc.fanotify_mark(fan, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, FAN_OPEN_PERM, AT_FDCWD, disk.encode()),
               f"fanotify_mark {disk}")
    os.nice(-10)  # an open on a worker's disk waits for this process's answer
    print("ready", flush=True)
    while True:
        buf = os.read(fan, 64 * EVENT.size)
        at = 0
        while at + EVENT.size <= len(buf):
            length, _, _, _, _, fd, pid = EVENT.unpack_from(buf, at)
            at += length
            if fd < 0:
                continue
            try:
                reader = node_of_netns.get(_read(f"/proc/{pid}/ns/net"))
                writer = node_of_disk.get(os.fstat(fd).st_dev)
                if reader and writer and reader != writer:
                    try:
                        command = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode().strip()[:300]
                    except OSError:
                        command = "?"
                    out.write(json.dumps({"reader": reader, "writer": writer, "path": _read(f"/proc/self/fd/{fd}"),
                                          "pid": pid, "command": command}) + "\n")
                    out.flush()
            finally:
                os.write(fan, RESPONSE.pack(fd, FAN_ALLOW))
                os.close(fd)


if __name__ == "__main__":
    main()
