"""The base of every summary.json model: an unknown field is refused, so a figure added on one side
and not the other fails loudly in the tests instead of vanishing from the report."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Doc(BaseModel):
    """A part of summary.json."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())
