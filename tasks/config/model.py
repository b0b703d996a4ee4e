"""The model every engine of a run serves: its name, revision and context window."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tasks.config.base import ConfigModel, Fix, PositiveInt


class ModelSpec(ConfigModel):
    name: str = Field("dayone-sim-model", min_length=1, description="Served model name, as /v1/models lists it.")
    revision: str = Field("main", min_length=1, description="Model revision (commit, branch or tag); a branch or tag "
                          "is resolved to its commit before deploy where model.revision_source or model.path says it.")
    context_limit_tokens: PositiveInt = Field(1_048_576, description="Model's context window in tokens.")
    template_overhead_tokens: int = Field(64, ge=0, description="Tokens the chat template adds around a prompt.")
    path: str | None = Field(None, description="Model files: a path in the pod's model volume, or a local GGUF file.")
    repo_id: str | None = Field(None, min_length=1, description="The model's repository on its hub, e.g. "
                                "zai-org/GLM-4.6, for resolving the revision; default: name.")
    revision_source: Annotated[str | None, Fix("give a hub's base URL (https://huggingface.co) or a local Hugging "
                                               "Face cache directory")] = Field(
        None, min_length=1, description="Where a moving revision (a branch or tag) is resolved to its commit before "
        "deploy: a hub's base URL (its API's /api/models/REPO/revision/REV) or a local Hugging Face cache "
        "directory (models--ORG--NAME/refs/REV). A commit revision, or a path through snapshots/<commit>, needs none.")
    reasoning: bool | None = Field(
        None, description="Does the model reason? true: a reply without any reasoning fails reasoning_split; "
                          "false or null (unknown): no reasoning is not applicable.")
