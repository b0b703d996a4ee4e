"""llama.cpp server settings: read by the llamacpp launcher here and the llamacpp dialect's container."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import ConfigDict, Field, model_validator

from tasks.config.base import ConfigModel, Fix
from tasks.config.model import ModelSpec
from tasks.config.models import KNOWN_MODELS

ReasoningFormat = Literal["none", "auto", "deepseek", "deepseek-legacy"]
FlashAttn = Literal["auto", "on", "off"]
_FLAG = Fix("give true or false")


class LlamaCppSettings(ConfigModel):
    """llama.cpp server settings for the llamacpp launcher (and the llamacpp dialect's container)."""

    # Strict like the server's own options: "4" or 1 for true is a mistake, not a number or a flag.
    model_config = ConfigDict(strict=True)

    model: Annotated[str | None, Fix(f"use one of {', '.join(KNOWN_MODELS)} or a GGUF file path")] = Field(
        None, description=f"GGUF model: {', '.join(KNOWN_MODELS)} (tasks/config/models.py) or a file path; "
                          "default: model.path, else smollm2.")
    ctx_size: Annotated[int, Fix("give the KV cache size in tokens, e.g. 4096")] = Field(
        4096, ge=256, description="KV cache size in tokens; with kv_unified every slot may use all.")
    parallel: Annotated[int, Fix("give the number of slots, an integer >= 1")] = Field(
        1, ge=1, description="Slots: requests decoded together (continuous batching).")
    threads: Annotated[int | None, Fix("give a thread count >= 1 (default: the CPU count minus one)")] = Field(
        None, ge=1, description="Decode threads; default (null): the CPU count minus one, one core left to the "
                                "load client.")
    threads_batch: Annotated[int | None, Fix("give a thread count >= 1 (default: threads)")] = Field(
        None, ge=1, description="Prompt-processing threads; default (null): threads.")
    batch_size: Annotated[int, Fix("give an integer >= 1")] = Field(
        2048, ge=1, description="Logical batch (n_batch).")
    ubatch_size: Annotated[int, Fix("give an integer >= 1, at most batch_size")] = Field(
        512, ge=1, description="Physical batch (n_ubatch), at most batch_size.")
    kv_unified: Annotated[bool, _FLAG] = Field(
        True, description="One KV buffer shared by all slots (false: ctx_size / parallel each).")
    cont_batching: Annotated[bool, _FLAG] = Field(True, description="Continuous batching.")
    cache_prompt: Annotated[bool, _FLAG] = Field(True, description="Reuse a slot's KV for a shared prompt prefix.")
    cache_ram_mib: Annotated[int, Fix("give MiB >= 0; 0 turns the host-RAM prompt cache off")] = Field(
        0, ge=0, description="Host-RAM prompt cache in MiB; 0 so a slot erase really empties the caches.")
    chat_template: Annotated[str, Fix("give a built-in template name such as chatml, or a Jinja template")] = Field(
        "", description="A built-in template name (e.g. chatml) or a Jinja template; empty: the model's own.")
    reasoning_format: Annotated[ReasoningFormat, Fix(f"use one of {', '.join(get_args(ReasoningFormat))}")] = Field(
        "deepseek", description="How reasoning is split from the content.")
    flash_attn: Annotated[FlashAttn, Fix(f"use one of {', '.join(get_args(FlashAttn))}")] = Field(
        "auto", description="Flash attention.")
    temperature: Annotated[float | None, Fix("give a temperature >= 0, e.g. 0 for greedy decoding")] = Field(
        None, ge=0, description="Default sampling temperature of requests that set none; default (null): "
                                "llama.cpp's (0.8).")

    @model_validator(mode="after")
    def _batches(self) -> LlamaCppSettings:
        if self.ubatch_size > self.batch_size:
            raise ValueError(f"ubatch_size: {self.ubatch_size} is over batch_size {self.batch_size}. "
                             "Fix: give ubatch_size <= batch_size")
        return self

    def model_for(self, model: ModelSpec) -> str:
        """The model the server loads: this setting, else model.path, else SmolLM2."""
        return self.model or model.path or "smollm2"
