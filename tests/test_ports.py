"""Ports for started processes come from below the ephemeral range, where no outgoing connection
takes its local port, and are free when handed out."""

from __future__ import annotations

import socket
from pathlib import Path

from tasks.ports import LOWEST, free_ports


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
        picks = iter([busy, busy, busy + 1 if busy + 1 < 60000 else busy - 1])
        monkeypatch.setattr("tasks.ports._random.randrange", lambda lo, hi: next(picks))
        monkeypatch.setattr("tasks.ports._ephemeral_low", lambda: 65535)
        monkeypatch.setattr("tasks.ports.LOWEST", 1024)
        (port,) = free_ports(1)
    assert port != busy
