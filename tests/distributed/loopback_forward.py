"""The deployment's services on each node's loopback: 127.0.0.1:PORT inside a node's network namespace
forwards to 127.0.0.1:PORT of this machine, where PostgreSQL, Redis, the S3 server and Airflow's API server
listen (as a sidecar proxy would give a pod its services on localhost).

    python loopback_forward.py NETNS_PATH,... PORT,...

Each listening socket is made inside a node's namespace (setns), every outgoing connection in this
machine's; prints `ready` once all listen. The nodes reach each other (and a node's engine) on their own
addresses, never through here.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import sys

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


def _listen_in(netns_path: str, ports: list[int]) -> list[socket.socket]:
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns_path, os.O_RDONLY)
    try:
        _setns(target)
        return [socket.create_server(("127.0.0.1", port), backlog=256) for port in ports]
    finally:
        _setns(home)
        os.close(target)
        os.close(home)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def _forward_to(port: int):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return handle


async def main() -> None:
    os.nice(-10)  # every worker's database, broker, S3 and API call waits on this process: first in line for a core
    paths, ports = sys.argv[1].split(","), [int(p) for p in sys.argv[2].split(",")]
    listening = [(sock, port) for path in paths for sock, port in zip(_listen_in(path, ports), ports)]
    servers = [await asyncio.start_server(_forward_to(port), sock=sock) for sock, port in listening]
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main())
