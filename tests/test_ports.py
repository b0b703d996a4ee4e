"""Ports for started processes come from below the ephemeral range, where no outgoing connection
takes its local port, and are free when handed out."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from tasks.core.ports import LOWEST, free_ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = free_ports(10)
    assert len(set(ports)) == 10 and all(LOWEST <= p < low for p in ports), ports
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))  # raises if it was not free


def test_a_port_in_use_is_not_handed_out(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        draws = []
        real_randrange = random.SystemRandom().randrange

        def busy_twice_then_random(lo, hi):
            # the busy port twice, then real draws: a fixed third pick may be busy on a shared machine
            draws.append(busy if len(draws) < 2 else real_randrange(lo, hi))
            return draws[-1]

        monkeypatch.setattr("tasks.core.ports._random.randrange", busy_twice_then_random)
        monkeypatch.setattr("tasks.core.ports._ephemeral_low", lambda: 65535)
        monkeypatch.setattr("tasks.core.ports.LOWEST", 1024)
        (port,) = free_ports(1)
    assert draws[:2] == [busy, busy] and port != busy and port == draws[-1]
