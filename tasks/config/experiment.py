"""The run config's experiment section: a base engine and the factors it varies.

Its expansion into variants and the check of their differences are tasks/config/variants.py's
(which imports nothing of the config, so the config's RunConfig can call it).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from tasks.config.base import ConfigModel, Fix
from tasks.config.engines import EngineSpec

SETTING_PATTERN = r"^[a-z_]+(\.[A-Za-z0-9_.-]+)?$"  # a field of the engine spec, then a key within it


class Factor(ConfigModel):
    setting: Annotated[str, Fix("give a field of the engine spec, e.g. llamacpp.parallel, env.NAME, image or args")] = (
        Field(..., min_length=1, description="A setting of the engine spec: image, args, gpus, env.NAME, "
              "llamacpp.parallel, sim_profile.slots, ...", json_schema_extra={"pattern": SETTING_PATTERN}))
    levels: Annotated[list[Any] | None, Fix("give a list of the setting's values, e.g. [1, 4]")] = Field(
        None, description="The setting's values; the base engine's own value is added when missing. Leave out "
                          "when the variants are written in engines by hand.")

    @field_validator("setting")
    @classmethod
    def _known_setting(cls, v: str) -> str:
        root = v.split(".")[0]
        if not re.fullmatch(SETTING_PATTERN, v) or root not in EngineSpec.model_fields or root == "name":
            raise ValueError(f"{v!r} is not a setting of an engine")
        return v


class Experiment(ConfigModel):
    """A base engine and the settings it varies (tasks/config/variants.py); every other difference is refused."""

    base: Annotated[str, Fix("name one of the run's engines")] = Field(
        ..., description="Name of the base engine in engines: the reference of every effect.")
    factors: list[Factor] = Field(..., min_length=1, description="Settings varied, each with its levels.")
    design: Literal["factorial", "one_at_a_time"] = Field(
        "factorial", description="factorial: every combination of levels; one_at_a_time: each level of one "
                                 "factor with the others at the base's values (the GLM-5.3-Flash Day 1 "
                                 "Hands-on report's one switch at a time).")
    order: Literal["auto", "interleaved", "randomized"] = Field(
        "auto", description="interleaved: variants up together, rounds alternate ABBA; randomized: one variant "
                            "after another in an order drawn per run; auto: interleaved where the variants can be "
                            "up together (local processes, distinct nodes).")
    allow_differences: list[str] = Field(
        default_factory=list, description="Settings that may differ between variants though not factors "
                                          "(e.g. node), recorded in the manifest.")

    @property
    def expands(self) -> bool:
        return all(f.levels is not None for f in self.factors)
