"""Free loopback ports for the processes DayOne starts (the simulator, llama.cpp, the local S3 server).

A port the kernel hands out for `bind(0)` comes from the ephemeral range, the same range every
outgoing connection takes its local port from: between choosing it and the started process binding
it, one of the load client's own connections (hundreds in a round) can take it. The ports here are
drawn at random below that range, where no connection lands, and each is checked by binding it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 20000
_random = random.SystemRandom()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; elsewhere a port below it is as good


def free_ports(n: int = 1, host: str = "127.0.0.1") -> list[int]:
    """`n` distinct ports that were free on `host` a moment ago, below the ephemeral range."""
    high = _ephemeral_low()
    if high - LOWEST < 100:  # a range configured to start low: fall back to the kernel's choice
        return _kernel_ports(n, host)
    held: list[socket.socket] = []
    try:
        for _ in range(50 * n):
            if len(held) == n:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((host, _random.randrange(LOWEST, high)))
            except OSError:
                s.close()
                continue
            held.append(s)
        if len(held) < n:
            raise OSError(f"no {n} free ports on {host} between {LOWEST} and {high}")
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def _kernel_ports(n: int, host: str) -> list[int]:
    held = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()
