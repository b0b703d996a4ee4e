"""What every section of the run config shares: the strict model, the error, and the fix a field carries.

A field's `Fix` sits in its annotation, beside the field it explains; `parse_run_config`
(tasks/config/parse.py) shows it after "Fix:" when the field is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field


class ConfigError(ValueError):
    """Invalid run config; `problems` holds (field path, message, fix) triples."""

    def __init__(self, problems: list[tuple[str, str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{f}: {m}. Fix: {x}" for f, m, x in problems))


@dataclass(frozen=True)
class Fix:
    """What to do when this field is wrong; `inside`: also for every field below it (a free object)."""

    text: str
    inside: bool = False


class ConfigModel(BaseModel):
    """A section of the run config: unknown fields refused, values frozen once parsed."""

    model_config = ConfigDict(extra="forbid", frozen=True)


PositiveInt = Annotated[int, Field(ge=1)]


def field_path(loc: tuple[Any, ...]) -> str:
    """A validation error's location as the field path users write: engines[0].image."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "config"
