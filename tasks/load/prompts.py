"""Deterministic filler text, needle prompts, and prompt lengths calibrated to exact token counts.

The filler is pseudo-random English-like sentences from a seeded generator: the same seed gives
the same text on every machine, so two runs send the same prompts. Lengths are calibrated through
the engine's tokenize endpoint where it has one (exact), else estimated (the actual count is
read from `usage` afterwards and recorded).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from tasks.engines import EngineAdapter

NEEDLE_TEMPLATE = "The secret code is {code}."
QUESTION = "\n\nWhat is the secret code mentioned in the text above? Reply with the code only."
# A base model continues text rather than answering: end a completion prompt in the answer's lead-in.
COMPLETION_QUESTION = "\n\nQuestion: What is the secret code mentioned in the text above?\nAnswer: The secret code is"
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no look-alikes (0/O, 1/I)
CODE_PATTERN = re.compile(r"[A-Z0-9-]+")
# Words per token for the estimate when no tokenizer is reachable; calibration corrects it.
ESTIMATED_TOKENS_PER_WORD = 1.3

_WORDS = (
    "river mountain garden window morning evening letter village market harbor station "
    "teacher painter farmer doctor sailor engineer student neighbor traveler merchant "
    "quiet bright early careful gentle heavy narrow ancient simple distant golden silver "
    "walks carries builds watches follows remembers opens closes paints writes reads finds "
    "under beside across through behind toward between around along beyond "
    "bread water stone paper lamp bridge road field forest cloud candle basket wheel "
    "slowly often always never rarely softly calmly quickly together again"
).split()


class CalibrationError(ValueError):
    """A prompt of the asked length could not be built (e.g. the target is too small)."""


def make_code(seed: str) -> str:
    """A needle code like `K7QX-94MB`, determined by `seed`."""
    rng = random.Random(f"code:{seed}")
    part = lambda: "".join(rng.choice(CODE_ALPHABET) for _ in range(4))  # noqa: E731
    return f"{part()}-{part()}"


class FillerPool:
    """Sentence-shaped filler words from a seeded generator; a word ending in '.' closes a
    sentence. Prefix-stable: `take(n)` is the first n words of `take(m)` for any m > n."""

    def __init__(self, seed: str = "dayone"):
        self._rng = random.Random(f"filler:{seed}")
        self._words: list[str] = []

    def take(self, count: int) -> list[str]:
        while len(self._words) < count:
            sentence = [self._rng.choice(_WORDS) for _ in range(self._rng.randint(8, 14))]
            sentence[0] = sentence[0].capitalize()
            sentence[-1] += "."
            self._words.extend(sentence)
        return self._words[:count]


def filler_words(count: int, seed: str = "dayone") -> list[str]:
    return FillerPool(seed).take(count)


def needle_text(words: list[str], depth: float, code: str, prompt_style: str = "chat") -> str:
    """Filler with the needle sentence placed at a sentence boundary near `depth`, then the question
    (for prompt_style "completion", the question and the answer's lead-in)."""
    cut = round(depth * len(words))
    while 0 < cut < len(words) and not words[cut - 1].endswith("."):
        cut -= 1  # back to the end of the previous sentence
    before, after = " ".join(words[:cut]), " ".join(words[cut:])
    needle = NEEDLE_TEMPLATE.format(code=code)
    body = " ".join(part for part in (before, needle, after) if part)
    return body + (COMPLETION_QUESTION if prompt_style == "completion" else QUESTION)


def plain_text(words: list[str]) -> str:
    return " ".join(words)


def find_code(answer: str, expected: str) -> bool:
    """A needle passes only when the exact code comes back as a whole token of the answer.

    A near miss (one character off, or the code inside a longer code) fails.
    """
    return expected in CODE_PATTERN.findall(answer or "")


# ---- token counting ----------------------------------------------------------------------


def tokenize_counter(client: httpx.Client, base_url: str, adapter: EngineAdapter) -> Callable[[str], int] | None:
    """A text -> token count function through the engine's tokenize endpoint, or None without one."""
    if adapter.tokenize_path is None:
        return None
    url = base_url.rstrip("/") + adapter.tokenize_path

    def count(text: str) -> int:
        r = client.post(url, json=adapter.tokenize_body(text))
        if r.status_code != 200:
            raise CalibrationError(f"POST {adapter.tokenize_path} -> {r.status_code}: {r.text[:200]}")
        body = r.json()
        n = int(body["count"]) if body.get("count") is not None else len(body["tokens"])
        if n == 0 and text.strip():
            # e.g. llama.cpp answers a body it does not understand with {"tokens": []}
            raise CalibrationError(f"POST {adapter.tokenize_path} counted 0 tokens in a non-empty text")
        return n

    return count


PAD_WORD = "and"  # one token in common tokenizers: closes the last gap to an exact length
MAX_PAD_WORDS = 3


@dataclass(frozen=True)
class CalibratedPrompt:
    text: str
    words: int
    counted_tokens: int | None  # by the tokenize endpoint; None when estimated
    estimated: bool


def calibrate(
    target_tokens: int,
    render: Callable[[list[str]], str],
    count: Callable[[str], int] | None,
    pool: FillerPool | None = None,
    max_rounds: int = 12,
) -> CalibratedPrompt:
    """The longest prompt `render(filler words)` whose token count is at most `target_tokens`,
    exact when the tokenizer allows it.

    Bracketing steps on the word count, then up to MAX_PAD_WORDS short words close the last
    gap. The result never exceeds the target, so a prompt sized to the model limit stays under it.
    """
    if target_tokens < 1:
        raise CalibrationError(f"target_tokens must be >= 1, got {target_tokens}")
    pool = pool or FillerPool()

    def text(words: int, pad: int = 0) -> str:
        return render(pool.take(words) + [PAD_WORD] * pad)

    if count is None:
        words = max(1, int(target_tokens / ESTIMATED_TOKENS_PER_WORD))
        return CalibratedPrompt(text(words), words, None, True)
    empty = count(text(0))
    if empty > target_tokens:
        raise CalibrationError(
            f"the fixed part of the prompt alone is {empty} tokens, over the target {target_tokens}"
        )
    sample_words = 2000
    per_word = max((count(text(sample_words)) - empty) / sample_words, 0.05)
    lo, lo_tokens = 0, empty  # the longest known prompt within the target
    hi: int | None = None  # the shortest known prompt over it
    guess = max(0, int((target_tokens - empty) / per_word))
    for _ in range(max_rounds):
        if hi is not None and hi - lo <= 1:
            break
        guess = min(max(guess, lo + 1), hi - 1) if hi is not None else max(guess, lo + 1)
        tokens = count(text(guess))
        if tokens == target_tokens:
            return CalibratedPrompt(text(guess), guess, tokens, False)
        if tokens < target_tokens:
            lo, lo_tokens = guess, tokens
            guess = guess + max(1, int((target_tokens - tokens) / per_word))
        else:
            hi = guess
            guess = guess - max(1, int((tokens - target_tokens) / per_word + 0.999))
        if hi is not None and not lo < guess < hi:
            guess = (lo + hi) // 2
    for pad in range(1, min(MAX_PAD_WORDS, target_tokens - lo_tokens) + 1):
        tokens = count(text(lo, pad))
        if tokens == target_tokens:
            return CalibratedPrompt(text(lo, pad), lo + pad, tokens, False)
        if tokens > target_tokens:
            break
    return CalibratedPrompt(text(lo), lo, lo_tokens, False)


TEMPLATE_PROBE = "Reply with one word."


def measure_template_tokens(
    client: httpx.Client, base_url: str, model: str, count: Callable[[str], int] | None
) -> int | None:
    """Tokens the chat template adds around a user message, measured: `usage.prompt_tokens` of a
    1-token chat request minus the tokenize count of its text. None when either is unavailable
    (the run config's template_overhead_tokens is used then)."""
    if count is None:
        return None
    try:
        r = client.post(
            base_url.rstrip("/") + "/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": TEMPLATE_PROBE}], "max_tokens": 1},
        )
        prompt_tokens = (r.json().get("usage") or {}).get("prompt_tokens") if r.status_code == 200 else None
        if prompt_tokens is None:
            return None
        return max(0, int(prompt_tokens) - count(TEMPLATE_PROBE))
    except (httpx.HTTPError, ValueError, CalibrationError):
        return None
