"""A trace row's prompt: each block id becomes a fixed block of token IDs drawn from the id, so rows sharing
leading block ids share that exact token prefix; the rest of a prompt is the row's own. Also the trace's
own expected prefix reuse (prompt tokens in leading blocks seen before)."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from tasks.engines.base import EngineAdapter
from tasks.load.plan import TOKEN_ID_RANGE
from tasks.traffic.trace_formats import TraceRow

BLOCK_CACHE = 4096  # encoded blocks kept: a shared prefix is drawn and encoded once while it is in use
# Each token ID's decimal text, looked up rather than formatted: a prompt's JSON in a quarter of the time.
_ID_TEXT = [str(i).encode() for i in range(TOKEN_ID_RANGE[1])]


def _ids_json(ids: list[int]) -> bytes:
    return b",".join([_ID_TEXT[i] for i in ids])


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def block_token_ids(salt: str, block_id: int, n: int) -> list[int]:
    """The first n token IDs of block `block_id` (the same for the same salt and id, whoever asks)."""
    rng = np.random.default_rng(_seed(f"{salt}/block/{block_id}"))
    return rng.integers(TOKEN_ID_RANGE[0], TOKEN_ID_RANGE[1], n).tolist()


def own_token_ids(salt: str, line: int, n: int) -> list[int]:
    """n token IDs no other row's prompt holds: the part of row `line`'s prompt past its blocks."""
    rng = np.random.default_rng(_seed(f"{salt}/line/{line}"))
    return rng.integers(TOKEN_ID_RANGE[0], TOKEN_ID_RANGE[1], n).tolist()


def prompt_token_ids(row: TraceRow, salt: str, block_tokens: int) -> list[int]:
    """The row's whole prompt: its blocks' tokens (the last one cut to fit), then its own tokens."""
    ids: list[int] = []
    for i, b in enumerate(row.block_ids):
        ids += block_token_ids(salt, b, min(block_tokens, row.input_tokens - i * block_tokens))
    return ids + own_token_ids(salt, row.line, row.input_tokens - len(ids))


class PromptEncoder:
    """A row's prompt as the JSON text of its token-ID list, built from encoded blocks kept while in use:
    a replay builds each prompt in microseconds, between its sends."""

    def __init__(self, salt: str, block_tokens: int, keep: int = BLOCK_CACHE):
        self.salt, self.block_tokens, self.keep = salt, block_tokens, keep
        self._blocks: OrderedDict[tuple[int, int], bytes] = OrderedDict()

    def _block(self, block_id: int, n: int) -> bytes:
        key = (block_id, n)
        text = self._blocks.get(key)
        if text is None:
            text = _ids_json(block_token_ids(self.salt, block_id, n))
            self._blocks[key] = text
            if len(self._blocks) > self.keep:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(key)
        return text

    def prompt_json(self, row: TraceRow) -> bytes:
        b = self.block_tokens
        parts = [self._block(blk, min(b, row.input_tokens - i * b)) for i, blk in enumerate(row.block_ids)]
        rest = row.input_tokens - min(row.input_tokens, len(row.block_ids) * b)
        if rest:
            parts.append(_ids_json(own_token_ids(self.salt, row.line, rest)))
        return b"[" + b",".join(parts) + b"]"


def completion_payload(model: str, prompt_json: bytes, output_tokens: int, adapter: EngineAdapter) -> bytes:
    """tasks/load/plan.py's completion body (streamed, usage asked, output length forced), its prompt spliced in."""
    from tasks.load.plan import completion_body

    head, tail = json.dumps(completion_body(model, [], output_tokens, adapter), separators=(",", ":")).split(
        '"prompt":[]', 1)
    return head.encode() + b'"prompt":' + prompt_json + tail.encode()


class ReuseMeter:
    """The trace's own expected prefix reuse: per row, the prompt tokens in its leading blocks that an earlier
    row of the replay already held whole (what an unbounded prefix cache could serve). Block ids are kept in a
    bitmap (trace ids are small consecutive integers: a million rows fit in a few MB), others in a set."""

    BITMAP_IDS = 1 << 28

    def __init__(self, block_tokens: int):
        self.block_tokens = block_tokens
        self._bits = bytearray()
        self._other: set[int] = set()
        self.prompt_tokens = 0
        self.reusable_tokens = 0

    def _seen(self, b: int) -> bool:
        if b < self.BITMAP_IDS:
            i = b >> 3
            return i < len(self._bits) and bool(self._bits[i] >> (b & 7) & 1)
        return b in self._other

    def _mark(self, b: int) -> None:
        if b < self.BITMAP_IDS:
            i = b >> 3
            if i >= len(self._bits):
                self._bits.extend(bytes(max(i + 1 - len(self._bits), len(self._bits))))
            self._bits[i] |= 1 << (b & 7)
        else:
            self._other.add(b)

    def observe(self, row: TraceRow) -> int:
        """The row's reusable prompt tokens (then its blocks count as seen)."""
        reusable, leading = 0, True
        for i, b in enumerate(row.block_ids):
            size = min(self.block_tokens, row.input_tokens - i * self.block_tokens)
            if leading and self._seen(b):
                reusable += size
            else:
                leading = False
            if size == self.block_tokens:  # a cut last block is not all of the block: later rows may hold more
                self._mark(b)
        self.prompt_tokens += row.input_tokens
        self.reusable_tokens += reusable
        return reusable

    @property
    def share(self) -> float | None:
        return self.reusable_tokens / self.prompt_tokens if self.prompt_tokens else None


def shared_prefix_tokens(a: Sequence[int], b: Sequence[int]) -> int:
    """Leading tokens two prompts share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
