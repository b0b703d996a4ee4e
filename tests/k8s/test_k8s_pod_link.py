"""The link between runner pods measuring one round together (tasks/load/pod_shards.py): a peer pod whose
clock runs 5 s ahead has its send times put on shard 0's clock before the rows merge, and neither end
acts on what the other did not sign: a pickle from the address the rendezvous names is never unpickled, an
altered or unsigned frame ends the link. Against bench/'s reference server, whose own arrival stamps say
when each request really came; the peer is a process of its own, as a pod is."""

from __future__ import annotations

import asyncio
import builtins
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tasks.load.pod_shards import PodShards, rendezvous_doc, serve_peer
from tasks.state.storage import RunDir

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from load_accuracy import ground_truth, start_server  # noqa: E402

GROUP, OFFSET_S, REQUESTS, CONCURRENCY = "short-ref", 5.0, 16, 4
# A peer pod as `dayone step --shard 1/2` runs one, its clock OFFSET_S ahead of shard 0's (set before any
# import, so every stamp it takes is on that clock).
PEER = """
import sys, time
_wall = time.time
time.time = lambda: _wall() + float(sys.argv[1])
from tasks.load.pod_shards import serve_peer
from tasks.state.storage import RunDir
sys.exit(serve_peer(RunDir("run-link", root=sys.argv[2]), sys.argv[3], 1, 60))
"""


@pytest.fixture(scope="module")
def reference():
    proc, url = start_server(None, ttft_s=0.01, itl_s=0.002)
    yield url
    proc.kill()
    proc.wait(10)


def test_a_peer_pods_send_times_are_put_on_shard_0s_clock_before_the_rows_merge(reference, tmp_path):
    from tasks.engines import adapter_for
    from tasks.load.plan import Shape, plan_requests

    root = tmp_path / "staging"
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(OFFSET_S), str(root), GROUP], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    adapter = adapter_for("sglang")
    specs = plan_requests(model="ref-model", adapter=adapter, shape=Shape(32, 8, CONCURRENCY), count=REQUESTS,
                          id_prefix="link", seed="link")
    shards = PodShards(RunDir("run-link", root=root), GROUP, 2, 1, CONCURRENCY, 60, host="127.0.0.1")
    try:
        shards.join()
        results, reports = asyncio.run(shards.measure(2, reference, specs, adapter, 30, concurrency=CONCURRENCY))
    finally:
        shards.close()
        out, _ = peer.communicate(timeout=60)
    assert peer.returncode == 0, out
    assert len(results) == REQUESTS and all(r.status == "ok" for r in results), results
    [peer_report] = [r for r in reports if r.pod == 1]
    assert abs(peer_report.offset_s - OFFSET_S) < 0.05, peer_report  # the offset DayOne measured
    truth = ground_truth(reference, {r.request_id for r in results})
    late = {r.request_id: r.send_ts - truth[r.request_id]["arrival_ts"] for r in results}
    print(f"peer offset measured {peer_report.offset_s:+.4f} s (planted {OFFSET_S:+.1f}), send - arrival "
          f"at most {1e3 * max(abs(d) for d in late.values()):.2f} ms over {len(late)} requests")
    # every send, the peer's too, within the loopback's and a loaded machine's slack of its arrival
    assert all(abs(d) < 0.05 for d in late.values()), late


class _Opener:
    """What a pickle from the network runs when it is unpickled: here it only creates a file."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return builtins.open, (str(self.path), "w")


def _impostor(payload: bytes) -> tuple[socket.socket, threading.Thread]:
    """A listener at the address a rendezvous names, which sends `payload` to whoever connects, reads what
    it is sent for a moment, and closes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        conn.sendall(payload)
        conn.settimeout(1.0)
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def test_a_peer_never_unpickles_what_the_address_in_the_rendezvous_sends(tmp_path):
    marker = tmp_path / "unpickled"
    data = pickle.dumps(_Opener(marker))
    listener, thread = _impostor(struct.pack("<I", len(data)) + data + struct.pack("<I", 0))
    staging = RunDir("run-link", root=tmp_path / "staging")
    staging.write_json(rendezvous_doc(GROUP), {"host": "127.0.0.1", "port": listener.getsockname()[1],
                                               "token": "t" * 32, "secret": "s" * 64, "pods": 2})
    try:
        code = serve_peer(staging, GROUP, 1, 10)
    finally:
        thread.join(10)
        listener.close()
    assert not marker.exists(), "the peer unpickled what the network sent it"
    assert code == 1


def test_shard_0_joins_only_a_peer_that_holds_the_secret_and_refuses_an_altered_frame(tmp_path):
    from tasks.core.signed_link import LinkRefused, open_link

    staging = RunDir("run-link", root=tmp_path / "staging")
    shards = PodShards(staging, GROUP, 2, 1, 4, 20, host="127.0.0.1")
    joined = threading.Thread(target=shards.join, daemon=True)
    joined.start()
    doc = None
    while doc is None:
        doc = staging.read_json(rendezvous_doc(GROUP))
    address = (doc["host"], doc["port"])
    # a connection without the secret: it names itself shard 1 and sends a pickle where a signed frame goes
    marker = tmp_path / "unpickled"
    with socket.create_connection(address) as stray:
        data = pickle.dumps(_Opener(marker))
        stray.sendall(struct.pack("<I", 1) + bytes(16) + struct.pack("<I", len(data)) + bytes(32) + data)
        stray.settimeout(5)
        assert len(stray.recv(16)) == 16 and stray.recv(1) == b""  # shard 0's nonce, then it closed
    # one that signs with a guessed secret is closed after its hello
    guessed = open_link(socket.create_connection(address), "not-the-secret", 1)
    try:
        assert guessed.recv() is None
    except OSError:
        pass
    assert not shards.peers and not marker.exists()
    # the real peer joins; a frame of it altered on the way is refused before anything decodes it
    peer = open_link(socket.create_connection(address), doc["secret"], 1)
    joined.join(10)
    assert list(shards.peers) == [1]
    frame = bytearray(peer.frame(b"a message"))
    frame[-1] ^= 1
    peer.write(bytes(frame))
    peer.flush()
    with pytest.raises(LinkRefused, match="signature"):
        shards.peers[1].recv()
    shards.close()
    peer.close()


def test_the_engines_key_never_crosses_the_link_a_peer_reads_it_from_its_own_environment(monkeypatch):
    from tasks.engines.access import api_key_env
    from tasks.load.pod_shards import Share, share_job

    assert "api_key" not in Share.__struct_fields__
    share = Share("http://engine:8000", [], "vllm", 30.0, True, "vllm-a", True, "/etc/ca.pem", True, 4, None, 0.0, 1)
    monkeypatch.setenv(api_key_env("vllm-a"), "k-from-the-secret")
    job = share_job(share)
    assert (job.access.api_key, job.access.ca_bundle, job.adapter.dialect) == (
        "k-from-the-secret", "/etc/ca.pem", "vllm")
    monkeypatch.delenv(api_key_env("vllm-a"))
    with pytest.raises(RuntimeError, match=api_key_env("vllm-a")):
        share_job(share)
