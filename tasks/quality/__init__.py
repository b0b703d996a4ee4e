"""Answers, not only speed: a generated task set with exactly checkable answers, sent to each engine at
greedy decoding, each verdict kept in the `quality` table (docs/PROTOCOL.md, "Answers")."""
