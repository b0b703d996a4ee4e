"""Greedy agreement: how often two engines' greedy answers to the same item are the same text, and where
the first one that differs parts (a diagnostic beside the parity verdicts; docs/PROTOCOL.md, "Answer parity")."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations
from statistics import median
from typing import Any


def first_divergence(a: str, b: str) -> int | None:
    """The character index where `a` and `b` first differ (the shorter one's length when one is a prefix
    of the other); None when they are equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def greedy_agreement(rows: Iterable[dict[str, Any]], engines: list[str]) -> list[dict[str, Any]]:
    """Per pair of engines (in `engines` order), over the items both answered (status ok, same prompt):
    the share of identical answers, and the first divergence (characters) of each item that differs."""
    answers: dict[str, dict[tuple[str, str], str]] = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("answer") is not None:
            answers.setdefault(r["engine"], {})[(r["item_id"], r["prompt_sha256"])] = r["answer"]
    out: list[dict[str, Any]] = []
    for a, b in combinations([e for e in engines if e in answers], 2):
        shared = sorted(answers[a].keys() & answers[b].keys())
        if not shared:
            continue
        parted = {k[0]: first_divergence(answers[a][k], answers[b][k]) for k in shared}
        differing = {item: at for item, at in parted.items() if at is not None}
        out.append({"a": a, "b": b, "items": len(shared), "identical": len(shared) - len(differing),
                    "identical_share": (len(shared) - len(differing)) / len(shared),
                    "first_divergence_chars": differing,
                    "median_first_divergence_chars": median(differing.values()) if differing else None})
    return out
