"""Block-hashed prefix cache with LRU eviction, counted in tokens like the real engines.

A prompt's tokens are cut into blocks of `block_tokens`; block i's key hashes block i's tokens
together with block i-1's key, so a block only matches when everything before it matches too.
A lookup counts the leading blocks already held (the hit), then stores all full blocks as most
recently used. As in vLLM, the last prompt token is always computed, so at most
(prompt_tokens - 1) // block_tokens blocks can hit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    def __init__(self, block_tokens: int, capacity_tokens: int, enabled: bool = True):
        self.block_tokens = block_tokens
        self.capacity_blocks = capacity_tokens // block_tokens
        self.enabled = enabled
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def lookup_and_store(self, tokens: Sequence[object]) -> int:
        """Cached tokens for this prompt (a multiple of block_tokens); stores its blocks."""
        if not self.enabled or self.capacity_blocks == 0:
            return 0
        b = self.block_tokens
        full = len(tokens) // b
        matchable = max(0, len(tokens) - 1) // b
        keys = []
        parent = 0
        for i in range(full):
            parent = hash((parent, tuple(tokens[i * b : (i + 1) * b])))
            keys.append(parent)
        hits = 0
        blocks = self._blocks
        for key in keys[:matchable]:
            if key not in blocks:
                break
            hits += 1
        for key in keys:
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)
        return hits * b

    def clear(self) -> None:
        self._blocks.clear()
