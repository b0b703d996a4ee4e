"""Frames between two processes over TCP, each signed with HMAC-SHA256: runner pods measuring one round
together (tasks/load/pod_shards.py) act only on what the other end signed, and never unpickle.

Both ends derive the member's key from a secret each was given apart (the rendezvous object in the run's
staging), so the secret never crosses the link. The listening end opens with a random nonce, the member
answers with its number and a nonce of its own, then with a signed hello. Each frame's tag covers both
nonces, the direction and a sequence number: a frame of another link, reflected back, replayed, reordered
or altered fails, and so does anything an end that lacks the secret sends. Payloads are bytes; callers
decode them as their own typed messages (msgspec), which builds no object a message names.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import struct
from typing import IO

HEAD = struct.Struct("<I")  # the payload's length; the member's number in the opening
NONCE_BYTES = 16
TAG_BYTES = hashlib.sha256().digest_size
MAX_PAYLOAD = 256 << 20  # a round's share of requests, prompts included, with room; more is not a peer's
HELLO = b"dayone pod link hello"


class LinkRefused(ConnectionError):
    """The other end is not who the secret says, or a frame was altered: nothing of it is used."""


def member_key(secret: str, member: int) -> bytes:
    """The key of member `member`'s link: one member's key opens no other member's link."""
    return hmac.new(secret.encode(), b"dayone pod link %d" % member, hashlib.sha256).digest()


def _read_exactly(rfile: IO[bytes], size: int) -> bytes | None:
    data = rfile.read(size)
    if not data:
        return None
    if len(data) < size:
        raise LinkRefused(f"the link ended inside a frame ({len(data)} of {size} bytes)")
    return data


class SignedLink:
    """One end of a link: send() and frame() sign, recv() verifies before it returns a payload."""

    def __init__(self, sock: socket.socket, rfile: IO[bytes], key: bytes, session: bytes, listening: bool):
        self.sock, self._key, self._session = sock, key, session
        self._rfile, self._wfile = rfile, sock.makefile("wb")  # rfile: the opening read through it, buffered
        self._out, self._in = (b"L", b"M") if listening else (b"M", b"L")
        self._sent = self._received = 0

    def _tag(self, direction: bytes, seq: int, payload: bytes) -> bytes:
        return hmac.new(self._key, self._session + direction + seq.to_bytes(8, "little") + payload,
                        hashlib.sha256).digest()

    def frame(self, payload: bytes) -> bytes:
        """The next frame of `payload`, for a writer of this link's own (a feed's thread); in send order."""
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"a frame of {len(payload)} bytes is over the link's {MAX_PAYLOAD}")
        tag = self._tag(self._out, self._sent, payload)
        self._sent += 1
        return HEAD.pack(len(payload)) + tag + payload

    def send(self, payload: bytes) -> None:
        self.write(self.frame(payload))
        self.flush()

    def write(self, data: bytes) -> int:
        return self._wfile.write(data)

    def flush(self) -> None:
        self._wfile.flush()

    def recv(self) -> bytes | None:
        """The next payload, verified; None when the other end closed the link between frames."""
        head = _read_exactly(self._rfile, HEAD.size)
        if head is None:
            return None
        (size,) = HEAD.unpack(head)
        if size > MAX_PAYLOAD:
            raise LinkRefused(f"a frame of {size} bytes announced, over the link's {MAX_PAYLOAD}")
        body = _read_exactly(self._rfile, TAG_BYTES + size)
        if body is None:
            raise LinkRefused("the link ended inside a frame")
        tag, payload = body[:TAG_BYTES], body[TAG_BYTES:]
        if not hmac.compare_digest(tag, self._tag(self._in, self._received, payload)):
            raise LinkRefused(f"frame {self._received} does not carry this link's signature")
        self._received += 1
        return payload

    def close(self) -> None:
        for f in (self._wfile, self._rfile):
            try:
                f.close()
            except OSError:
                pass
        self.sock.close()


def accept_link(sock: socket.socket, secret: str, members: range) -> tuple[int, SignedLink]:
    """The listening end of a connection just accepted: the member it is and its link; LinkRefused when it
    is not a member that holds the secret (the caller closes the socket and listens on)."""
    ours = secrets.token_bytes(NONCE_BYTES)
    sock.sendall(ours)
    rfile = sock.makefile("rb")
    opening = _read_exactly(rfile, HEAD.size + NONCE_BYTES)
    if opening is None:
        raise LinkRefused("closed before it said which member it is")
    (member,) = HEAD.unpack(opening[:HEAD.size])
    if member not in members:
        raise LinkRefused(f"member {member} is not one of {members.start}..{members.stop - 1}")
    link = SignedLink(sock, rfile, member_key(secret, member), ours + opening[HEAD.size:], listening=True)
    if link.recv() != HELLO:
        raise LinkRefused(f"member {member} did not sign its hello")
    return member, link


def open_link(sock: socket.socket, secret: str, member: int) -> SignedLink:
    """The connecting end: member `member` of the listening end's link, signed hello sent."""
    rfile = sock.makefile("rb")
    theirs = _read_exactly(rfile, NONCE_BYTES)
    if theirs is None:
        raise LinkRefused("the listening end closed before it opened the link")
    ours = secrets.token_bytes(NONCE_BYTES)
    sock.sendall(HEAD.pack(member) + ours)
    link = SignedLink(sock, rfile, member_key(secret, member), theirs + ours, listening=False)
    link.send(HELLO)
    return link
