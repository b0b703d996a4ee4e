"""Answer parity: two engines' verdicts on the same items, per family, compared item by item: the items are
fixed and decoded greedily, so an item right on one engine and wrong on the other is a change in itself;
Newcombe's paired score interval speaks for the family's other items (docs/PROTOCOL.md, "Answer parity")."""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import combinations
from typing import Any

from tasks.stats.intervals import wilson

DIFFER = "answers differ"
ALIKE = "no detectable difference"


def paired_difference(both: int, only_a: int, only_b: int, neither: int,
                      confidence: float) -> tuple[float, float]:
    """The interval of accuracy(A) - accuracy(B) over items both answered (Newcombe 1998, method 10):
    each side's Wilson interval, combined with the correlation of the pairs. Items both get right or
    both get wrong narrow it; with no correlation it is the unpaired Newcombe interval."""
    n = both + only_a + only_b + neither
    if n == 0:
        return -1.0, 1.0
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    l1, u1 = wilson(both + only_a, n, confidence)
    l2, u2 = wilson(both + only_b, n, confidence)
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    phi = (both * neither - only_a * only_b) / math.sqrt(margins) if margins else 0.0
    d = p1 - p2
    below = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    above = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, d - below), min(1.0, d + above)


def unstable(row: dict[str, Any]) -> bool:
    """Wrong (or failed) at first and right when asked again: the engine's numerics, not a change of answers."""
    return not row.get("correct") and row.get("reask_correct") is True


def _verdicts(rows: Iterable[dict[str, Any]]) -> dict[str, dict[tuple[str, str], tuple[str, bool, bool]]]:
    """engine -> (item_id, prompt_sha256) -> (family, correct at the first ask, unstable)."""
    out: dict[str, dict[tuple[str, str], tuple[str, bool, bool]]] = {}
    for r in rows:
        out.setdefault(r["engine"], {})[(r["item_id"], r["prompt_sha256"])] = (
            r["family"], bool(r["correct"]), unstable(r))
    return out


def answer_parity(rows: Iterable[dict[str, Any]], engines: list[str],
                  confidence: float = 0.95) -> list[dict[str, Any]]:
    """Per pair of engines (in `engines` order) and family, over the items both were sent (same id, same
    prompt): the four pair counts, the paired interval of accuracy(a) - accuracy(b), the items answered right
    by one only and the verdict: the answers differ where any item is right on one and wrong on the other,
    its wrong answer confirmed by a re-ask (an item right on re-ask is `unstable_*`, listed, never a change);
    `worse` is the engine that answered items wrong the other answered right, where only one did (where both
    did, the one the interval puts below, if it does). A failed request counts as a wrong answer. The interval
    counts first asks: the sample as sent."""
    verdicts = _verdicts(rows)
    out: list[dict[str, Any]] = []
    for a, b in combinations([e for e in engines if e in verdicts], 2):
        shared = sorted(verdicts[a].keys() & verdicts[b].keys())
        families = sorted({verdicts[a][k][0] for k in shared})
        for family in families:
            keys = [k for k in shared if verdicts[a][k][0] == family]
            first_a = [k for k in keys if verdicts[a][k][1] and not verdicts[b][k][1]]
            first_b = [k for k in keys if verdicts[b][k][1] and not verdicts[a][k][1]]
            right_a = [k[0] for k in first_a if not verdicts[b][k][2]]
            right_b = [k[0] for k in first_b if not verdicts[a][k][2]]
            both = sum(verdicts[a][k][1] and verdicts[b][k][1] for k in keys)
            neither = len(keys) - both - len(first_a) - len(first_b)
            low, high = paired_difference(both, len(first_a), len(first_b), neither, confidence)
            if right_a and right_b:  # each answered items the other missed
                worse = b if low > 0 else a if high < 0 else None
            else:
                worse = b if right_a else a if right_b else None
            out.append({"a": a, "b": b, "family": family, "items": len(keys), "both_right": both,
                        "only_a_right": right_a, "only_b_right": right_b, "neither_right": neither,
                        "unstable_a": sorted(k[0] for k in keys if verdicts[a][k][2]),
                        "unstable_b": sorted(k[0] for k in keys if verdicts[b][k][2]),
                        "low": low, "high": high, "confidence": confidence,
                        "verdict": DIFFER if right_a or right_b else ALIKE, "worse": worse})
    return out
