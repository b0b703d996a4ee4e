"""The engine adapter: each engine's dialect (endpoints, field names, metric names, launch
arguments) lives in its adapter and nowhere else. The rest of DayOne asks the adapter.

PROTOCOL.md section 2.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import httpx

from tasks.core.polling import TimedOut, poll


@dataclass(frozen=True)
class CacheCounters:
    """Prometheus counter names whose deltas give the prefix-cache hit rate (both in tokens)."""

    queries: str
    hits: str
    # A labelled prometheus_client counter is absent from the exposition until its first increment (SGLang's:
    # no sglang:cached_tokens_total before the first hit): absent beside a present `queries` then means 0.
    absent_until_first: bool = False


@dataclass(frozen=True)
class RoundMetrics:
    """Prometheus names of what an engine spent in a round (tasks/telemetry/engine_metrics.py).

    Counters are read as deltas over the round; gauges are sampled while it runs; histograms
    (base names, without _sum/_count/_bucket) give the server's own mean and quantiles over the
    round from deltas. None: the engine does not expose that figure.
    """

    preemptions: str | None = None  # counter: requests evicted and recomputed (vLLM) or retracted (SGLang)
    preemption_word: str = "preemptions"
    kv_usage: str | None = None  # gauge, fraction of the KV cache in use (0..1)
    waiting: str | None = None  # gauge: requests queued (deferred) by the engine
    running: str | None = None  # gauge: requests running
    queue_time: str | None = None  # histogram, seconds a request waited before it was scheduled
    ttft: str | None = None  # histogram, seconds
    itl: str | None = None  # histogram, seconds
    e2e: str | None = None  # histogram, seconds
    # Speculative decoding as counters (vLLM, llama.cpp): verification steps, drafted, accepted tokens.
    spec_drafts: str | None = None
    spec_draft_tokens: str | None = None
    spec_accepted_tokens: str | None = None
    # ... or as last-value gauges (SGLang): mean accepted length (bonus token included), acceptance rate.
    spec_accept_length: str | None = None
    spec_accept_rate: str | None = None
    # Counters and histograms absent from the exposition until their first observation (labelled prometheus_client
    # metrics: SGLang's retractions, its ITL histogram): absent from a scrape that holds the engine's other metrics
    # means 0.
    absent_until_first: tuple[str, ...] = ()

    @property
    def counters(self) -> tuple[str, ...]:
        names = (self.preemptions, self.spec_drafts, self.spec_draft_tokens, self.spec_accepted_tokens)
        return tuple(n for n in names if n)

    @property
    def gauges(self) -> tuple[str, ...]:
        names = (self.kv_usage, self.waiting, self.running, self.spec_accept_length, self.spec_accept_rate)
        return tuple(n for n in names if n)

    @property
    def histograms(self) -> tuple[str, ...]:
        return tuple(n for n in (self.queue_time, self.ttft, self.itl, self.e2e) if n)


@dataclass(frozen=True)
class HitRate:
    queries_delta: float | None
    hits_delta: float | None
    # Why the deltas are not published (a counter fell, the engine restarted); None when they are.
    unpublished: str | None = None

    @property
    def rate(self) -> float | None:
        if self.unpublished or not self.queries_delta or self.hits_delta is None:
            return None
        return self.hits_delta / self.queries_delta


@dataclass(frozen=True)
class Readiness:
    ready: bool
    stage: str  # "liveness" | "models" | "generate" | "ready"
    detail: str = ""


@dataclass(frozen=True)
class StartupPattern:
    finding: str
    severity: str  # info | warning | error
    regex: re.Pattern[str]
    unless: re.Pattern[str] | None = None  # a line that also says this is no such event (e.g. "disabling")

    def finds(self, line: str) -> bool:
        return self.regex.search(line) is not None and not (self.unless and self.unless.search(line))


def _pattern(finding: str, severity: str, regex: str, unless: str | None = None) -> StartupPattern:
    return StartupPattern(finding, severity, re.compile(regex, re.IGNORECASE),
                          re.compile(unless, re.IGNORECASE) if unless else None)


@dataclass(frozen=True)
class StartupMemory:
    """What an engine says about its memory in its own startup log (EngineAdapter.startup_memory).

    Sizes in GiB (SGLang's "GB" is 2**30 bytes, vLLM logs GiB, llama.cpp MiB). None: not in the log.
    """

    kv_tokens: int | None = None  # tokens the KV cache holds, all requests together
    kv_cache_gib: float | None = None
    weights_gib: float | None = None
    # A hybrid model's recurrent state pool (Mamba/KDA conv and SSM states), where the engine logs it apart from KV.
    state_pool_gib: float | None = None
    context_tokens: int | None = None  # the per-request context the engine sized itself for
    max_concurrency: float | None = None  # requests of context_tokens the KV cache holds at once
    max_concurrency_logged: bool = False  # the engine logged it (vLLM); else kv_tokens / context_tokens
    lines: tuple[str, ...] = ()  # the log lines each figure was read from
    unread: Mapping[str, str] = field(default_factory=dict)  # a figure left None on purpose: why, where known

    def with_concurrency(self) -> StartupMemory:
        """max_concurrency from kv_tokens / context_tokens where the engine did not log it."""
        if self.max_concurrency is not None or not self.kv_tokens or not self.context_tokens:
            return self
        return replace(self, max_concurrency=self.kv_tokens / self.context_tokens)


def number(value: str) -> float:
    """A logged number: thousands separators dropped ("4,455,808")."""
    return float(value.replace(",", ""))


# How an engine answered a prefix-cache clear (EngineAdapter.clear_outcome).
CLEARED, BUSY, FAILED = "cleared", "busy", "failed"

# Patterns every engine's startup log is scanned for; adapters add their own.
COMMON_STARTUP_PATTERNS: tuple[StartupPattern, ...] = (
    _pattern("out_of_memory", "error", r"out of memory|CUDA error: out of memory|OutOfMemoryError"),
    # SGLang: "Capture cuda graph begin" (older), "Capture target decode CUDA graph begin" (role and
    # phase between); vLLM: "Capturing CUDA graphs (decode, FULL)", "Graph capturing finished in".
    _pattern("cuda_graph_capture", "info", r"\bcaptur\w*(?: \w+){0,2} cuda graph|cuda graph captur|\bgraph capturing finished"),
    # Not on a line that says compiling is off (vLLM's --enforce-eager: "disabling torch.compile, ... JIT").
    _pattern("autotune_jit", "info", r"autotun|\bJIT\b|compiling kernel|torch\.compile", unless=r"\bdisabl|\bskipp"),
    _pattern("fallback_backend", "warning", r"fall(?:s|ing)? ?back|fallback"),
    _pattern("missing_tuned_config", "warning", r"(?:no|missing|not found).{0,40}(?:tun(?:ed|ing)) config|using default .{0,30}config"),
)


class EngineAdapter:
    """One engine dialect. Subclasses set the class attributes and override what differs."""

    dialect: ClassVar[str] = "openai"
    default_port: ClassVar[int] = 8000
    liveness_path: ClassVar[str] = "/health"
    # The pod's liveness probe: it must answer fast while the engine is busy for minutes (a long
    # prefill), so never a path that generates. None: liveness_path.
    pod_liveness_path: ClassVar[str | None] = None
    models_path: ClassVar[str] = "/v1/models"
    metrics_path: ClassVar[str | None] = "/metrics"
    tokenize_path: ClassVar[str | None] = None
    # (method, path) of the prefix-cache clear endpoint, or None where the engine has none.
    cache_clear: ClassVar[tuple[str, str] | None] = None
    # Status the clear endpoint answers while requests are running; such a clear is retried.
    cache_clear_busy_status: ClassVar[int | None] = None
    # How long a clear is retried while the engine says requests still hold the cache.
    cache_clear_wait_s: ClassVar[float] = 30.0
    cache_counters: ClassVar[CacheCounters | None] = None
    # What the engine spent per round: preemptions, KV usage, queue, its own latency histograms.
    round_metrics: ClassVar[RoundMetrics] = RoundMetrics()
    # Fields of a message/delta that may carry reasoning text, read in this order.
    reasoning_fields: ClassVar[tuple[str, ...]] = ("reasoning_content", "reasoning")
    startup_patterns: ClassVar[tuple[StartupPattern, ...]] = ()
    # Startup lines that echo the engine's settings (a config dump names every switch, on or off): not events,
    # so never a finding.
    startup_settings_lines: ClassVar[re.Pattern[str] | None] = None
    # Directories the launch command needs to exist (and be writable) in the container: a pod
    # mounts an empty volume at each, since an image has no such directory of DayOne's choosing.
    launch_dirs: ClassVar[tuple[str, ...]] = ()
    # False where the server closes the connection after a streamed response although it
    # answered keep-alive: a client must not reuse that connection (it fails on the next write).
    keeps_alive_after_stream: ClassVar[bool] = True
    # Engine arguments that switch speculative decoding on, and that set the weights' dtype or
    # quantization; empty where DayOne does not read the dialect's (what a run did not prove says so).
    speculative_args: ClassVar[tuple[str, ...]] = ()
    weights_dtype_args: ClassVar[tuple[str, ...]] = ()
    # Prompt log-probabilities (log-likelihood parity): the path that scores a prompt's tokens, or None
    # with why not (the step records not_applicable with that reason).
    prompt_logprobs_path: ClassVar[str | None] = None
    prompt_logprobs_missing: ClassVar[str] = "the OpenAI API returns log-probabilities of generated tokens only"
    # Whether startup_memory's weights and KV are one card's (each tensor-parallel rank logs its own share and the
    # first rank's line is read) or the whole engine's (a card's share: divided by the tensor-parallel size).
    startup_memory_per_card: ClassVar[bool] = False

    def launch_setting(self, args: list[str], names: tuple[str, ...]) -> str | None:
        """The value of the first of `names` among engine arguments (`--x v` or `--x=v`; "on" for a bare
        flag), None when none is given."""
        for i, arg in enumerate(args):
            name, eq, value = arg.partition("=")
            if name in names:
                if eq:
                    return value
                following = args[i + 1] if i + 1 < len(args) else ""
                return following if following and not following.startswith("-") else "on"
        return None

    # ---- request shaping -------------------------------------------------------------
    def prompt_logprobs_body(self, text: str, model: str) -> dict[str, Any]:
        """The request to `prompt_logprobs_path` that scores every token of `text`."""
        raise NotImplementedError(self.prompt_logprobs_missing)

    def prompt_logprobs(self, body: Any) -> list[float]:
        """The log-probability of each prompt token after the first (which has no context), from the response."""
        raise NotImplementedError(self.prompt_logprobs_missing)

    def exact_output_fields(self, output_tokens: int) -> dict[str, Any]:
        """Request fields that force exactly `output_tokens` tokens where the engine allows it."""
        return {"max_tokens": output_tokens, "ignore_eos": True, "min_tokens": output_tokens}

    def tokenize_body(self, text: str) -> dict[str, Any]:
        """The JSON body of a request to `tokenize_path` for `text` (the field name differs)."""
        return {"prompt": text}

    def cached_tokens(self, usage: dict[str, Any] | None) -> int | None:
        """Cached prompt tokens reported in `usage`, if the engine reports them."""
        if not usage:
            return None
        details = usage.get("prompt_tokens_details") or {}
        value = details.get("cached_tokens")
        return int(value) if value is not None else None

    def reasoning_fields_in(self, message: dict[str, Any]) -> tuple[str, ...]:
        """The dialect fields of a message or delta that carry reasoning text (a frontend reading only one
        of them misses the rest)."""
        return tuple(name for name in self.reasoning_fields if message.get(name))

    def reasoning_text(self, message: dict[str, Any]) -> str:
        """Reasoning text of a message or delta, from whichever dialect field carries it."""
        for name in self.reasoning_fields:
            value = message.get(name)
            if value:
                return str(value)
        return ""

    # ---- cache --------------------------------------------------------------------------
    def hit_rate(self, before: dict[str, float], after: dict[str, float]) -> HitRate:
        """Hit rate over a window from counter deltas (never from a last-value gauge).

        `before`/`after` map metric names (as in the Prometheus exposition, summed over labels)
        to values, as `tasks.telemetry.metrics.scrape` returns them.
        """
        if self.cache_counters is None:
            return HitRate(None, None)
        q, h = self.cache_counters.queries, self.cache_counters.hits
        if self.cache_counters.absent_until_first and q in before and q in after:
            before, after = {h: 0.0, **before}, {h: 0.0, **after}
        if q not in before or q not in after or h not in before or h not in after:
            return HitRate(None, None)
        return HitRate(after[q] - before[q], after[h] - before[h])

    def clear_outcome(self, response: httpx.Response) -> str:
        """How the engine answered a clear: CLEARED, BUSY (requests hold the cache: retry) or FAILED."""
        if self.cache_clear_busy_status is not None and response.status_code == self.cache_clear_busy_status:
            return BUSY
        return CLEARED if response.status_code < 300 else FAILED

    def clear_cache_once(self, client: httpx.Client, base_url: str) -> tuple[str, str]:
        """One clear request: (outcome, detail), the detail naming the status and the body's start."""
        if self.cache_clear is None:
            return FAILED, f"{self.dialect} has no cache-clear endpoint"
        method, path = self.cache_clear
        r = client.request(method, base_url.rstrip("/") + path)
        body = " ".join(r.text.split())[:120]
        return self.clear_outcome(r), f"{method} {path} -> {r.status_code}" + (f" {body}" if body else "")

    def clear_cache(self, client: httpx.Client, base_url: str) -> tuple[bool, str]:
        """Empty the prefix cache. Returns (done, detail)."""
        outcome, detail = self.clear_cache_once(client, base_url)
        return outcome == CLEARED, detail

    def clear_cache_when_idle(
        self, client: httpx.Client, base_url: str, timeout_s: float | None = None, interval_s: float = 0.5
    ) -> tuple[bool, str]:
        """Empty the prefix cache, retrying while the engine says requests still hold it.

        Done only when the engine says the cache was cleared; a refusal that outlasts the wait is
        reported with the number of tries, never taken for a clear.
        """
        wait_s = self.cache_clear_wait_s if timeout_s is None else timeout_s
        started = time.monotonic()
        tries = 0
        refusal = ""

        def not_busy() -> tuple[str, str] | None:
            nonlocal tries, refusal
            tries += 1
            outcome, detail = self.clear_cache_once(client, base_url)
            if outcome == BUSY:
                refusal = detail
                return None
            return outcome, detail

        try:
            outcome, detail = poll(not_busy, timeout_s=wait_s, interval_s=interval_s)
        except TimedOut:
            return False, (
                f"{refusal} on all {tries} tries over {time.monotonic() - started:.1f} s: the prefix cache never "
                "cleared (the engine kept refusing while requests held it)"
            )
        except httpx.HTTPError as exc:
            return False, f"cache clear failed: {type(exc).__name__}: {exc}"
        return outcome == CLEARED, detail + (f" after {tries} tries" if tries > 1 else "")

    # ---- readiness ------------------------------------------------------------------------
    async def probe_ready(self, client: httpx.AsyncClient, base_url: str, model: str) -> Readiness:
        """Liveness, then the model list, then a 1-token generation: ready only when all pass."""
        base = base_url.rstrip("/")
        try:
            r = await client.get(base + self.liveness_path)
            if r.status_code != 200:
                return Readiness(False, "liveness", f"{self.liveness_path} -> {r.status_code}")
            r = await client.get(base + self.models_path)
            if r.status_code != 200:
                return Readiness(False, "models", f"{self.models_path} -> {r.status_code}")
            ids = [m.get("id") for m in r.json().get("data", [])]
            if model not in ids:
                return Readiness(False, "models", f"model {model!r} not listed (have {ids})")
            r = await client.post(
                base + "/v1/completions",
                json={"model": model, "prompt": "Hello", "max_tokens": 1},
            )
            if r.status_code != 200:
                return Readiness(False, "generate", f"1-token generation -> {r.status_code}")
        except (httpx.HTTPError, ValueError) as exc:
            return Readiness(False, "liveness", f"{type(exc).__name__}: {exc}")
        return Readiness(True, "ready", "health, model list and a 1-token generation passed")

    # ---- what it serves ----------------------------------------------------------------------
    def served_model(self, client: httpx.Client, base_url: str, model: str) -> dict[str, Any]:
        """What the engine reports of the weights it serves: `revision` (as it was started with),
        `model_path` (a Hugging Face snapshot path names the commit) and `source` (the endpoints that
        said it); Nones where it says nothing. Here: the model list's `root` (vLLM's ModelCard)."""
        found: dict[str, Any] = {"revision": None, "model_path": None, "source": []}
        entry = next((m for m in _json(client, base_url.rstrip("/") + self.models_path).get("data") or []
                      if isinstance(m, dict) and m.get("id") == model), {})
        if entry.get("root") and entry.get("root") != model:
            found["model_path"] = str(entry["root"])
            found["source"].append(f"GET {self.models_path} root")
        return found

    # ---- what the model takes ------------------------------------------------------------------
    # The engine's words when it refuses an image because the served model takes text only (a 4xx body).
    text_only_refusal: ClassVar[re.Pattern[str] | None] = None

    def takes_images(self, client: httpx.Client, base_url: str, model: str) -> tuple[bool | None, str]:
        """Whether the served model takes images, as the engine reports it, and the endpoint and field that said
        so; (None, "") where the engine says nothing."""
        return None, ""

    # ---- deployment -------------------------------------------------------------------------
    # The Python module that serves the engine from a virtual environment of its own on this machine (the local
    # target's launcher named after the dialect); None where there is no such launcher.
    local_module: ClassVar[str | None] = None

    def launch_command(self, engine: Any, model: Any, port: int) -> list[str]:
        """The engine's container command line (Kubernetes target)."""
        raise NotImplementedError(f"{self.dialect}: no container command")

    def local_command(self, engine: Any, model: Any, port: int, host: str, python: str) -> list[str]:
        """The engine's command line on this machine: `python -m local_module` with the container command's
        flags, serving the model directory `model.path`, listening on `host`."""
        raise NotImplementedError(f"{self.dialect}: no local command")

    def launch_env(self, engine: Any) -> dict[str, str]:
        return dict(engine.env)

    def startup_memory(self, text: str) -> StartupMemory:
        """KV cache size, weights memory and the context the engine sized itself for, from its startup
        log. The base engine logs none of it."""
        return StartupMemory()

    def scan_startup_log(self, text: str) -> list[dict[str, str]]:
        """Findings in a startup log: one per (pattern, line)."""
        found = []
        for line in text.splitlines():
            if self.startup_settings_lines and self.startup_settings_lines.search(line):
                continue
            for p in self.startup_patterns + COMMON_STARTUP_PATTERNS:
                if p.finds(line):
                    found.append({"finding": p.finding, "severity": p.severity, "line": line.strip()[:500]})
                    break
        return found


def _json(client: httpx.Client, url: str) -> dict[str, Any]:
    """A JSON object from GET `url`; {} when the engine does not answer one (an endpoint it lacks)."""
    try:
        r = client.get(url)
        body = r.json() if r.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}
