"""A synthetic request trace in the Mooncake format, the same bytes for the same seed: Poisson arrivals,
log-normal prompt and output lengths, shared system prompts and conversations that extend earlier prompts.
Nothing is downloaded: the demo, the simulator preset and the tests replay it; real traces are the user's."""

from __future__ import annotations

import json
import math
import random
from collections import deque
from collections.abc import Iterator

BLOCK_TOKENS = 512  # Mooncake's traces' block size: rows share prefixes in whole blocks, so only prompts over 512 tokens do
SYSTEM_PROMPTS = 8  # shared leading prefixes (an app's system prompt), 1-4 blocks each
FOLLOW_UP_SHARE = 0.35  # rows that continue an earlier row's conversation: its whole prompt, then new blocks
RECENT = 256  # conversations a follow-up may continue


def synthetic_rows(seed: int, requests: int, rate_rps: float = 10.0, max_input_tokens: int = 4096,
                   max_output_tokens: int = 256) -> Iterator[dict[str, object]]:
    """`requests` Mooncake rows: timestamp (ms), input_length, output_length, hash_ids."""
    rng = random.Random(seed)
    next_id = 0

    def new_blocks(n: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + n))
        next_id += n
        return ids

    systems = [new_blocks(rng.randint(1, 4)) for _ in range(SYSTEM_PROMPTS)]
    recent: deque[tuple[list[int], int]] = deque(maxlen=RECENT)
    t = 0.0
    for _ in range(requests):
        own = max(1, min(max_input_tokens, int(rng.lognormvariate(math.log(600), 0.9))))
        if recent and rng.random() < FOLLOW_UP_SHARE:
            prefix, prefix_len = rng.choice(recent)
            prefix_len = len(prefix) * BLOCK_TOKENS  # the conversation so far, rounded up to its blocks
        else:
            prefix = systems[min(SYSTEM_PROMPTS - 1, int(rng.paretovariate(1.2)) - 1)]
            prefix_len = len(prefix) * BLOCK_TOKENS
        if prefix_len + own > max_input_tokens:  # too long to continue: a fresh prompt of its own
            prefix, prefix_len = [], 0
            own = min(own, max_input_tokens)
        input_length = prefix_len + own
        hash_ids = prefix + new_blocks(-(-input_length // BLOCK_TOKENS) - len(prefix))
        output_length = max(1, min(max_output_tokens, int(rng.lognormvariate(math.log(80), 0.8))))
        recent.append((hash_ids, input_length))
        yield {"timestamp": int(t * 1000), "input_length": input_length, "output_length": output_length,
               "hash_ids": hash_ids}
        t += rng.expovariate(rate_rps)


def synthetic_lines(seed: int, requests: int, **kwargs: float | int) -> Iterator[str]:
    """The rows as JSONL lines (each ends in a newline)."""
    for row in synthetic_rows(seed, requests, **kwargs):  # type: ignore[arg-type]
        yield json.dumps(row, separators=(", ", ": ")) + "\n"
