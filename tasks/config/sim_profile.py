"""The simulator's profile: everything that shapes its behaviour, one validated model.

A profile comes from a YAML file, a JSON string, and `key.path=value` overrides, merged in that
order. Unknown fields are errors that name the field, so a typo never silently does nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tasks.core.dcgm import DCGM_EXPORTER_DEFAULT_REFRESH_S


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBurst(_Model):
    """HTTP errors for a run of requests (by count) or for a time window after ready.

    Count form: requests number after_requests+1 .. after_requests+count (1-based arrival order,
    generation endpoints only) get `status`. Window form: every generation request arriving
    between start_s and start_s+duration_s seconds after the server became ready gets `status`.
    """

    after_requests: int | None = Field(None, ge=0)
    count: int | None = Field(None, ge=1)
    start_s: float | None = Field(None, ge=0)
    duration_s: float | None = Field(None, gt=0)
    status: int = Field(503, ge=500, le=599)

    @model_validator(mode="after")
    def _one_form(self) -> ErrorBurst:
        by_count = self.after_requests is not None and self.count is not None
        by_time = self.start_s is not None and self.duration_s is not None
        if by_count == by_time:
            raise ValueError(
                "faults.error_burst: give either after_requests and count, or start_s and duration_s"
            )
        return self


class Stall(_Model):
    """In every nth stream, after `after_events` output events, send nothing for `seconds`."""

    after_events: int = Field(1, ge=0)
    seconds: float = Field(2.0, gt=0)
    every_nth: int = Field(1, ge=1)


class Faults(_Model):
    crash_after_requests: int | None = Field(None, ge=1, description="Exit after this many finished requests.")
    never_ready: bool = False
    error_burst: ErrorBurst | None = None
    stall: Stall | None = None
    malformed_sse_every_nth: int | None = Field(None, ge=1)
    cut_stream_every_nth: int | None = Field(None, ge=1)
    restart_on_crash: bool = Field(False, description="A supervisor respawns the server after a crash.")
    restart_after_requests: int | None = Field(
        None, ge=1, description="After this many finished requests the engine restarts in place between two "
        "requests: counters back to zero, cache emptied, a new process_start_time_seconds, the restart count "
        "up by one, no request lost (a supervisor that brings it back at once).",
    )
    counter_base_drop_after_requests: int | None = Field(
        None, ge=1, description="After this many finished requests the counters fall back by counter_base, "
        "with no restart (process_start_time_seconds unchanged), as a counter reset does.",
    )


class Quirks(_Model):
    reasoning_inline: bool = Field(False, description="Reasoning stays in the content inside <think>...</think>.")
    reasoning_field: Literal["reasoning_content", "reasoning"] | None = Field(
        None, description="The field reasoning comes in, instead of the dialect's (e.g. an older vLLM's reasoning_content)."
    )
    echo_ignored: bool = Field(False, description="/v1/completions returns the prompt even with echo=false.")
    unstreamed_every_nth: int | None = Field(
        None, ge=1, description="Every nth stream sends empty deltas and the whole text in its last event."
    )
    usage_missing: bool = Field(False, description="Streams never carry usage, even with include_usage.")
    metrics: Literal["normal", "absent", "renamed"] = "normal"


class Preemption(_Model):
    """Every nth stream (admission order) is preempted once halfway through its output: the KV
    cache had no room, so the engine evicts it and recomputes it (vLLM counts a preemption, SGLang
    a retraction). Its stream pauses `recompute_s`; the counter moves when the pause begins."""

    every_nth: int = Field(..., ge=1)
    recompute_s: float = Field(0.05, ge=0)


class SpeculativeProfile(_Model):
    """Speculative decoding: `draft_tokens` drafted per verification step, `acceptance_rate` of them
    accepted (accepted / drafted, as vLLM and SGLang report it). Each step costs one `itl_s` and
    yields 1 + acceptance_rate x draft_tokens tokens, so the gap per token shrinks by that factor."""

    draft_tokens: int = Field(3, ge=1)
    acceptance_rate: float = Field(0.6, ge=0, le=1)

    @property
    def mean_accepted_length(self) -> float:
        return 1.0 + self.acceptance_rate * self.draft_tokens


class Gpus(_Model):
    """The GPUs behind the simulator's DCGM-style exporter (GET /dcgm/metrics). They work in step
    (tensor parallel): utilization = running / slots; power per GPU = idle_power_w + (busy_power_w -
    idle_power_w) x utilization; the energy counter is that power integrated over time (mJ, from
    energy_base_mj); framebuffer used = weights_mib + kv_cache_mib x KV usage, free = memory_total_mib - used."""

    count: int = Field(1, ge=1, le=16)
    product: str = Field("NVIDIA H100 80GB HBM3", min_length=1)
    idle_power_w: float = Field(70.0, ge=0)
    busy_power_w: float = Field(700.0, ge=0)
    weights_mib: float = Field(16_000.0, ge=0)
    kv_cache_mib: float = Field(48_000.0, ge=0)
    # An H100 80GB's framebuffer as the driver reports it (nvidia-smi memory.total); FB_FREE = this - FB_USED.
    memory_total_mib: float = Field(81_559.0, gt=0)
    energy_base_mj: float = Field(1e9, ge=0, description="The energy counter at start (it counts since boot).")
    energy_reset_after_requests: int | None = Field(
        None, ge=1, description="After this many finished requests the energy counter starts again from 0 (a "
        "driver reload or GPU reset), with no engine restart.")
    exporter_refresh_s: float = Field(
        DCGM_EXPORTER_DEFAULT_REFRESH_S, gt=0, description="How often the DCGM-style exporter refreshes the values it "
        "serves (dcgm-exporter's collect-interval, 30 s by default); between refreshes every read sees the same values.")

    @model_validator(mode="after")
    def _busy_above_idle(self) -> Gpus:
        if self.busy_power_w < self.idle_power_w:
            raise ValueError("gpus.busy_power_w: below idle_power_w. Fix: give busy_power_w >= idle_power_w")
        return self


class QualityPlant(_Model):
    """Planted wrong answers to the quality step's items (tasks/sim/solver.py): the share of each family's
    items answered wrong, with an answer of the right shape. Every other item is answered right."""

    wrong_share: dict[Literal["kv_retrieval", "copy_reverse", "arithmetic", "sorting", "json_schema",
                              "multi_turn_recall", "tool_call"], float] = Field(
        default_factory=dict, description="Family -> share of its items answered wrong (0 to 1).")
    nll_offset_nats: float = Field(0.0, ge=0, description="Taken off every prompt token's log-probability: "
                                   "a planted NLL gap (tasks/sim/loglik.py).")
    nll_offset_nats_per_1k_tokens: float = Field(0.0, ge=0, description="And this much more per 1,000 tokens of "
                                                 "depth: a planted NLL that rises with context length.")

    @model_validator(mode="after")
    def _shares(self) -> QualityPlant:
        for family, share in self.wrong_share.items():
            if not 0 <= share <= 1:
                raise ValueError(f"quality.wrong_share.{family}: {share} is not a share. Fix: give 0 to 1")
        return self


class Profile(_Model):
    model: str = Field("dayone-sim-model", min_length=1)
    model_path: str | None = Field(
        None, min_length=1, description="The path the engine says it loaded (the model list's root, SGLang's "
        "model_info), e.g. a Hugging Face snapshot .../snapshots/<commit>; default: the model's name.")
    context_limit: int = Field(1_048_576, ge=16)
    startup_delay_s: float = Field(0.0, ge=0)
    startup_log_lines: list[str] = Field(
        default_factory=list, description="Extra startup log lines, before the ready line (e.g. one naming a host)."
    )
    slots: int = Field(64, ge=1, description="Requests running at once; the rest queue.")
    decode_knee: int | None = Field(
        None, ge=0, description="A planted capacity: while more requests than this run, every decode step is "
        "decode_knee_factor times slower (the batch outgrew the GPU), so TPOT leaves its SLO above this concurrency; "
        "0 makes every step slow, an engine that meets the SLO at no load.")
    decode_knee_factor: float = Field(3.0, ge=1, description="Slowdown of every output event gap beyond decode_knee.")
    ttft_base_s: float = Field(0.02, ge=0)
    prefill_tokens_per_s: float = Field(50_000.0, gt=0)
    itl_s: float = Field(0.005, ge=0)
    itl_jitter_s: float = Field(0.0, ge=0, description="Extra gap drawn uniformly from [0, itl_jitter_s), seeded.")
    launch_speed_sd: float = Field(
        0.0, ge=0, le=2, description="A planted launch-to-launch variation: each process start draws its own "
        "slowdown exp(N(0, launch_speed_sd)) from seed and its launch index (DAYONE_LAUNCH), applied to the TTFT "
        "and every output gap, as a real engine's speed differs from one start to the next.")
    tokens_per_event: int = Field(1, ge=1)
    seed: int = 0
    jit_delay_s: float = Field(0.0, ge=0, description="Engine-wide pause the first time a shape bucket is seen.")
    prefix_cache: bool = True
    cache_block_tokens: int = Field(16, ge=1)
    cache_capacity_tokens: int = Field(2_000_000, ge=0)
    reasoning: bool = False
    reasoning_tokens: int = Field(8, ge=1, description="Reasoning tokens before the content, when reasoning is on.")
    natural_output_tokens: int = Field(
        16, ge=1, description="Where the model 'stops' by itself when neither ignore_eos nor min_tokens asks for more."
    )
    dev_mode: bool = Field(False, description="vLLM only: serve /reset_prefix_cache (VLLM_SERVER_DEV_MODE=1).")
    vllm_reset_reply: Literal["success_flag", "empty"] = Field(
        "success_flag",
        description="vLLM only: how /reset_prefix_cache answers. success_flag (current vLLM): 200 "
        '{"success": false} while requests run, clearing nothing, else {"success": true}. empty (older '
        "vLLM): an empty 200 either way, though nothing is cleared while requests run.",
    )
    needle_max_depth: float | None = Field(None, ge=0, le=1)
    needle_max_tokens: int | None = Field(None, ge=1)
    quality: QualityPlant = Field(default_factory=QualityPlant,
                                  description="Wrong answers planted in the quality step's families.")
    counter_base: float = Field(
        0.0, ge=0, description="Added to every counter in /metrics, as on an engine that served before the run."
    )
    faults: Faults = Field(default_factory=Faults)
    quirks: Quirks = Field(default_factory=Quirks)
    # What the engine spends (tasks/telemetry/engine_metrics.py reads it back from /metrics).
    preemption: Preemption | None = Field(None, description="Plant preemptions (retractions on SGLang).")
    speculative: SpeculativeProfile | None = Field(None, description="Speculative decoding: its counters and faster TPOT.")
    gpus: Gpus = Field(default_factory=Gpus, description="The simulated GPUs its DCGM-style exporter reports.")


class ProfileError(ValueError):
    """A profile that does not validate; the message names each field and what to do."""


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(item: str) -> dict[str, Any]:
    """`faults.stall.seconds=2` -> {"faults": {"stall": {"seconds": 2}}}; the value is read as YAML."""
    if "=" not in item:
        raise ProfileError(f"--set {item!r}: expected KEY.PATH=VALUE, e.g. --set faults.never_ready=true")
    path, raw = item.split("=", 1)
    value: Any = yaml.safe_load(raw) if raw else None
    for key in reversed(path.strip().split(".")):
        value = {key: value}
    return value


def load_profile(
    file: str | Path | None = None, json_text: str | None = None, overrides: list[dict[str, Any]] | None = None
) -> Profile:
    data: dict[str, Any] = {}
    if file:
        loaded = yaml.safe_load(Path(file).read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise ProfileError(f"--profile {file}: expected a mapping of profile fields at the top level")
        data = deep_merge(data, loaded)
    if json_text:
        try:
            loaded = json.loads(json_text)
        except json.JSONDecodeError as exc:
            raise ProfileError(f"--profile-json: not valid JSON ({exc}); give an object like '{{\"slots\": 8}}'") from None
        if not isinstance(loaded, dict):
            raise ProfileError("--profile-json: expected a JSON object of profile fields")
        data = deep_merge(data, loaded)
    for extra in overrides or []:
        data = deep_merge(data, extra)
    return validate_profile(data)


def validate_profile(data: dict[str, Any] | None) -> Profile:
    try:
        return Profile.model_validate(data or {})
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "profile"
            fix = "remove it (see tasks/config/sim_profile.py for the fields)" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"{where}: {err['msg']}. Fix: {fix}")
        raise ProfileError("invalid simulator profile: " + "; ".join(problems)) from None
