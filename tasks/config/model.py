"""The model every engine of a run serves: its name, revision and context window."""

from __future__ import annotations

from pydantic import Field

from tasks.config.base import ConfigModel, PositiveInt


class ModelSpec(ConfigModel):
    name: str = Field("dayone-sim-model", min_length=1, description="Served model name, as /v1/models lists it.")
    revision: str = Field("main", min_length=1, description="Model revision (commit or tag) recorded in the manifest.")
    context_limit_tokens: PositiveInt = Field(1_048_576, description="Model's context window in tokens.")
    template_overhead_tokens: int = Field(64, ge=0, description="Tokens the chat template adds around a prompt.")
    path: str | None = Field(None, description="Model files: a path in the pod's model volume, or a local GGUF file.")
    reasoning: bool | None = Field(
        None, description="Does the model reason? true: a reply without any reasoning fails reasoning_split; "
                          "false or null (unknown): no reasoning is not applicable.")
