"""The simulator's own tokenizer: exact, repeatable, no downloads.

Rule: every run of non-whitespace characters is cut into pieces of at most 4 characters, and
each piece is one token ("Hello, world!" -> "Hell", "o,", "worl", "d!" = 4 tokens). Whitespace
is free. Token ids: pieces of the fixed vocabulary (all lowercase strings of 1 to 3 letters, then
4-letter ones, VOCAB_SIZE in all) get their index; any other piece gets VOCAB_SIZE + a CRC32.
Decoding writes vocabulary words separated by spaces, so decoding N ids gives a text of N tokens.
"""

from __future__ import annotations

import re
import string
import zlib
from itertools import product

VOCAB_SIZE = 32_000
_PIECE = re.compile(r"\S{1,4}")


def _build_vocab() -> list[str]:
    words: list[str] = []
    for n in range(1, 5):
        for letters in product(string.ascii_lowercase, repeat=n):
            words.append("".join(letters))
            if len(words) == VOCAB_SIZE:
                return words
    return words


VOCAB: list[str] = _build_vocab()
_IDS: dict[str, int] = {w: i for i, w in enumerate(VOCAB)}


def pieces(text: str) -> list[str]:
    """The token pieces of a text (what the prefix cache hashes)."""
    return _PIECE.findall(text)


def count_tokens(text: str) -> int:
    return len(_PIECE.findall(text))


def encode(text: str) -> list[int]:
    return piece_ids(_PIECE.findall(text))


def piece_ids(tokens: list[str | int]) -> list[int]:
    """Token ids of pieces (ids pass through unchanged)."""
    ids = _IDS
    return [t if isinstance(t, int) else ids[t] if t in ids else VOCAB_SIZE + zlib.crc32(t.encode()) for t in tokens]


def decode(ids: list[int]) -> str:
    return " ".join(VOCAB[i % VOCAB_SIZE] for i in ids)
